"""Webhooks under hostile input (issue 15). Unverified requests are bounded: a capped, expiring
quarantine of digests with a count per endpoint, and a rate limit per endpoint; the append-only
table takes verified events only. Validly signed but odd events (ids too long or missing, arrays,
deep nesting, a Stripe signature from the future) are a 400 in the error shape, never a 500, and
store nothing there. Bodies are held to one limit, a JSON 413 however they arrive. Signatures are
made by the providers' own libraries (testkit.webhook_signing)."""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from notary import services as notary_services
from notary.models import Tenant
from testkit.factories import INSTANT, dispatched, register
from testkit.notary_server import free_port, running_notary
from testkit.paths import child_database_url
from testkit.webhook_signing import (
    as_headers,
    body_of,
    new_secret,
    resend_event,
    signed_headers,
    stripe_refund_event,
)
from webhooks import selectors, services
from webhooks.models import Endpoint, Ingestion, RawEvent, UnverifiedRequest
from webhooks.tasks import prune_unverified_requests

pytestmark = pytest.mark.django_db

PROVIDERS = ["stripe", "resend", "standard"]
ERROR_SHAPE = {"error", "detail"}


def make_endpoint(tenant: Tenant, provider: str, target: str = "refunds") -> tuple[Endpoint, str]:
    secret = new_secret(provider)
    made = services.endpoint_create(
        tenant=tenant,
        target=register(tenant, target, evidence_window=INSTANT),
        provider=provider,
        secrets=[secret],
        effect_id_path="data.ref" if provider == "standard" else "",
    )
    return made, secret


@pytest.fixture
def stripe_endpoint(acme: Tenant) -> tuple[Endpoint, str]:
    return make_endpoint(acme, "stripe")


def post(made: Endpoint, body: bytes, headers: dict[str, Any], path: str = "") -> Any:
    return Client().post(
        path or f"/webhooks/{made.public_id}/",
        data=body,
        content_type="application/json",
        **headers,
    )


def signed_post(made: Endpoint, secret: str, body: bytes, **kwargs: Any) -> Any:
    return post(made, body, signed_headers(made.provider, body, secret, **kwargs))


def forged_post(made: Endpoint, body: bytes) -> Any:
    return signed_post(made, new_secret(made.provider), body, event_id="msg_forged")


def refused(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/json"
    data: dict[str, Any] = answer.json()
    assert set(data) == ERROR_SHAPE
    assert data["error"] == code
    return data


# --- HIGH: unverified requests are bounded --------------------------------------------------


def test_an_unverified_request_is_quarantined_as_a_digest_and_counted_never_stored(
    stripe_endpoint: tuple[Endpoint, str],
) -> None:
    made, _ = stripe_endpoint
    body = b"\x00" * 1000 + b"random bytes from anyone who knows the URL"
    answer = post(made, body, {"HTTP_STRIPE_SIGNATURE": "t=1,v1=forged"})
    refused(answer, 400, "signature")
    assert not RawEvent.objects.exists()  # was: every forgery kept forever, append-only
    kept = UnverifiedRequest.objects.get(endpoint=made)
    assert kept.reason == "signature"
    assert (kept.body_sha256, kept.body_size) == (hashlib.sha256(body).hexdigest(), len(body))
    assert kept.headers["stripe-signature"] == "t=1,v1=forged"
    assert "SignatureVerificationError" in kept.error
    made.refresh_from_db()
    assert made.unverified_count == 1
    assert made.last_unverified_at is not None


def test_the_quarantine_keeps_the_newest_per_endpoint_and_counts_them_all(
    acme: Tenant, settings: Any
) -> None:
    settings.WEBHOOK_QUARANTINE_KEEP = 3
    made, _ = make_endpoint(acme, "resend", target="mail")
    other, _ = make_endpoint(acme, "stripe")
    forged_post(other, b"{}")
    bodies = [f'{{"n": {n}}}'.encode() for n in range(7)]
    for body in bodies:
        refused(forged_post(made, body), 400, "signature")
    kept = UnverifiedRequest.objects.filter(endpoint=made).order_by("pk")
    assert [r.body_sha256 for r in kept] == [hashlib.sha256(b).hexdigest() for b in bodies[-3:]]
    made.refresh_from_db()
    assert made.unverified_count == 7
    assert UnverifiedRequest.objects.filter(endpoint=other).count() == 1  # its own cap


def test_quarantined_requests_expire_on_insert_and_by_the_beat_task(
    acme: Tenant, settings: Any
) -> None:
    settings.WEBHOOK_QUARANTINE_SECONDS = 3600
    quiet, _ = make_endpoint(acme, "stripe")
    busy, _ = make_endpoint(acme, "resend", target="mail")
    for made in (quiet, busy):
        forged_post(made, b"{}")
    old = timezone.now() - timedelta(seconds=3601)
    UnverifiedRequest.objects.update(received_at=old)  # the quarantine is not append-only
    forged_post(busy, b"{}")
    assert UnverifiedRequest.objects.filter(endpoint=busy).count() == 1  # pruned on insert
    assert UnverifiedRequest.objects.filter(endpoint=quiet).count() == 1  # nothing new there
    assert prune_unverified_requests() == 1
    assert prune_unverified_requests() == 0  # safe to rerun
    assert not UnverifiedRequest.objects.filter(endpoint=quiet).exists()
    assert UnverifiedRequest.objects.filter(endpoint=busy).count() == 1


def test_unverified_requests_past_the_limit_are_429_while_verified_events_still_pass(
    acme: Tenant, settings: Any
) -> None:
    settings.WEBHOOK_UNVERIFIED_PER_MINUTE = 3
    made, secret = make_endpoint(acme, "stripe")
    neighbour, _ = make_endpoint(acme, "resend", target="mail")
    for _ in range(3):
        refused(forged_post(made, b"{}"), 400, "signature")
    for _ in range(2):
        limited = forged_post(made, b"{}")
        refused(limited, 429, "rate_limited")
        assert limited["Retry-After"] == "60"
    assert UnverifiedRequest.objects.filter(endpoint=made).count() == 3  # 429s are not stored
    made.refresh_from_db()
    assert made.unverified_count == 3
    assert selectors.unverified_this_minute(endpoint=made) == 5  # what the admin shows
    real = body_of(stripe_refund_event(None))
    assert signed_post(made, secret, real).status_code == 200  # a forger cannot block the provider
    refused(forged_post(neighbour, b"{}"), 400, "signature")  # per endpoint


def test_the_append_only_table_refuses_unverified_rows(
    stripe_endpoint: tuple[Endpoint, str],
) -> None:
    made, _ = stripe_endpoint
    with pytest.raises(IntegrityError, match="rawevent_verified_only"), transaction.atomic():
        RawEvent.objects.create(endpoint=made, headers={}, body=b"{}", verified=False)


def test_the_admin_shows_the_count_per_endpoint(
    stripe_endpoint: tuple[Endpoint, str], admin_client: Client
) -> None:
    made, _ = stripe_endpoint
    forged_post(made, b"{}")
    page = admin_client.get(f"/admin/webhooks/endpoint/{made.pk}/change/").content.decode()
    assert "not verified, this minute" in page.lower()
    assert ">1<" in page.replace("\n", "").replace(" ", "")  # the count and this minute's
    quarantine = admin_client.get("/admin/webhooks/unverifiedrequest/")
    assert quarantine.status_code == 200
    assert hashlib.sha256(b"{}").hexdigest() in quarantine.content.decode()


# --- LOW: validly signed but odd events are a 400, never a 500, and store nothing ------------


def test_an_event_id_over_255_characters_is_refused_not_a_500(acme: Tenant) -> None:
    resend, resend_secret = make_endpoint(acme, "resend", target="mail")
    body = body_of(resend_event("email.sent"))
    answer = signed_post(resend, resend_secret, body, event_id="msg_" + "x" * 300)
    assert "255" in refused(answer, 400, "invalid_event")["detail"]
    stripe, stripe_secret = make_endpoint(acme, "stripe")
    event = {**stripe_refund_event(None), "id": "evt_" + "x" * 300}
    refused(signed_post(stripe, stripe_secret, body_of(event)), 400, "invalid_event")
    assert not RawEvent.objects.exists()
    assert set(UnverifiedRequest.objects.values_list("reason", flat=True)) == {"invalid_event"}


def test_a_stripe_body_that_is_a_json_array_is_refused(
    stripe_endpoint: tuple[Endpoint, str],
) -> None:
    made, secret = stripe_endpoint
    body = json.dumps([stripe_refund_event(None)]).encode()
    assert "list" in refused(signed_post(made, secret, body), 400, "invalid_event")["detail"]
    assert not RawEvent.objects.exists()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_json_nests_at_most_64_deep(acme: Tenant, provider: str) -> None:
    made, secret = make_endpoint(acme, provider, target=f"t-{provider}")

    def nested(levels: int) -> bytes:  # the event object is level 1
        inner = "[" * (levels - 1) + "]" * (levels - 1)
        return f'{{"id": "evt_{levels}", "type": "x", "deep": {inner}}}'.encode()

    assert signed_post(made, secret, nested(64), event_id="m64").status_code == 200
    for levels in (65, 5000, 100_000):  # past the limit, and past the parser's own recursion
        answer = signed_post(made, secret, nested(levels), event_id=f"m{levels}")
        assert "64" in refused(answer, 400, "invalid_event")["detail"]
    assert RawEvent.objects.count() == 1


def test_a_stripe_event_without_an_id_is_refused_not_stored_as_none(
    stripe_endpoint: tuple[Endpoint, str],
) -> None:
    made, secret = stripe_endpoint
    for event_id in (None, "", 42, ["evt_1"], "evt\x00", "evt_\ud800"):
        event = {**stripe_refund_event(None), "id": event_id}
        body = json.dumps(event).encode()  # ASCII: lone surrogates escaped
        refused(signed_post(made, secret, body), 400, "invalid_event")
    id_less = {k: v for k, v in stripe_refund_event(None).items() if k != "id"}
    refused(signed_post(made, secret, body_of(id_less)), 400, "invalid_event")
    assert not RawEvent.objects.exists()  # was: "None" stored, then every id-less event a dup


def test_a_stripe_signature_from_the_future_is_refused_both_ways(
    stripe_endpoint: tuple[Endpoint, str],
) -> None:
    made, secret = stripe_endpoint
    for offset in (365 * 24 * 3600, 301, -301):
        body = body_of(stripe_refund_event(None))
        answer = signed_post(made, secret, body, at=time.time() + offset)
        refused(answer, 400, "signature")
    assert not RawEvent.objects.exists()
    within = body_of(stripe_refund_event(None))
    assert signed_post(made, secret, within, at=time.time() + 200).status_code == 200


def test_odd_but_signed_evidence_is_ingested_without_error(acme: Tenant) -> None:
    """Accepted events whose fields are of the wrong type or size become evidence without them
    (was: OverflowError on `created`, TypeError on a list status or tag name, DataError on a
    result reference too long for the effect row), so no event can poison the ingestion sweep."""
    made, secret = make_endpoint(acme, "stripe")
    effect_id = dispatched(acme, "refunds", "case-1")
    event = stripe_refund_event(effect_id)
    event["created"] = 10**20
    event["type"] = "\ud800" * 3
    event["data"]["object"]["status"] = ["succeeded"]
    event["data"]["object"]["id"] = "re_" + "x" * 300
    answer = signed_post(made, secret, json.dumps(event).encode())
    assert answer.status_code == 200, answer.content
    ingestion = services.event_ingest(raw_event_id=RawEvent.objects.get().pk)
    assert ingestion.effect_id == effect_id
    assert ingestion.outcome == "recorded"  # an unknown status: evidence, not a verdict

    mail, mail_secret = make_endpoint(acme, "resend", target="mail")
    odd = resend_event("email.sent", email_id="em_1")
    odd["data"]["tags"] = [{"name": ["interlock_effect_id"], "value": "x"}, {"name": None}]
    odd["created_at"] = {"not": "a time"}
    assert signed_post(mail, mail_secret, body_of(odd), event_id="m1").status_code == 200
    stored = RawEvent.objects.get(endpoint=mail)
    assert services.event_ingest(raw_event_id=stored.pk).outcome == "unmatched"


# --- LOW: one body limit, a JSON 413 however the body arrives; wrong methods --------------------


def test_one_body_limit_above_djangos_own(
    stripe_endpoint: tuple[Endpoint, str], settings: Any
) -> None:
    made, secret = stripe_endpoint
    settings.WEBHOOK_MAX_BODY_BYTES = 3 * 1024 * 1024
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < 2_800_000  # Django's, 2.5 MiB
    event = {**stripe_refund_event(None), "padding": "x" * 2_800_000}
    answer = signed_post(made, secret, body_of(event))
    assert answer.status_code == 200, answer.content[:300]  # was: Django's HTML 400
    too_big = {**stripe_refund_event(None), "padding": "x" * (3 * 1024 * 1024)}
    refused(signed_post(made, secret, body_of(too_big)), 413, "too_large")
    assert RawEvent.objects.count() == 1


def test_a_content_length_that_is_not_a_number_is_a_400(
    stripe_endpoint: tuple[Endpoint, str],
) -> None:
    made, _ = stripe_endpoint
    answer = post(made, b"{}", {"CONTENT_LENGTH": "12abc"})
    refused(answer, 400, "invalid")


def test_a_content_length_smaller_than_the_body_reads_the_declared_bytes_only(
    stripe_endpoint: tuple[Endpoint, str], settings: Any
) -> None:
    made, secret = stripe_endpoint
    settings.WEBHOOK_MAX_BODY_BYTES = 1000
    body = body_of({**stripe_refund_event(None), "padding": "x" * 5000})
    headers = signed_headers("stripe", body, secret)
    refused(post(made, body, {**headers, "CONTENT_LENGTH": "500"}), 400, "signature")
    assert UnverifiedRequest.objects.get().body_size == 500
    assert not RawEvent.objects.exists()


@pytest.mark.parametrize("method", ["get", "put", "delete", "patch", "options", "head"])
def test_other_methods_are_a_json_405_with_allow(
    stripe_endpoint: tuple[Endpoint, str], method: str
) -> None:
    made, _ = stripe_endpoint
    answer = getattr(Client(), method)(f"/webhooks/{made.public_id}/")
    assert answer.status_code == 405
    assert answer["Allow"] == "POST"
    if method != "head":
        refused(answer, 405, "method_not_allowed")


def test_a_post_without_the_trailing_slash_is_answered_not_redirected(
    stripe_endpoint: tuple[Endpoint, str], settings: Any
) -> None:
    made, secret = stripe_endpoint
    settings.DEBUG = True  # where Django's APPEND_SLASH refuses to redirect a POST with a 500
    body = body_of(stripe_refund_event(None))
    headers = signed_headers("stripe", body, secret)
    answer = post(made, body, headers, path=f"/webhooks/{made.public_id}")
    assert answer.status_code == 200, answer.content[:300]


def raw_http(url: str, request: bytes) -> tuple[int, dict[str, Any]]:
    """Send bytes as they are (httpx would fix a lying Content-Length); the status and JSON."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.slow
def test_under_gunicorn_chunked_and_lying_bodies_meet_the_same_limit(
    transactional_db: None, tmp_path: Path
) -> None:
    acme = notary_services.tenant_create(slug="acme", name="Acme")
    made, secret = make_endpoint(acme, "stripe")
    path = f"/webhooks/{made.public_id}/"
    limit = 64 * 1024

    def chunks(data: bytes) -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding chunked
        yield from (data[i : i + 8192] for i in range(0, len(data), 8192))

    with running_notary(
        child_database_url(), tmp_path, settings={"WEBHOOK_MAX_BODY_BYTES": str(limit)}
    ) as url:
        body = body_of(stripe_refund_event(None))
        headers = as_headers(signed_headers("stripe", body, secret))
        with httpx.Client(base_url=url, timeout=60) as client:
            small = client.post(path, content=chunks(body), headers=headers)
            assert small.status_code == 200, small.text  # was: read as empty, a 400
            big = body_of({**stripe_refund_event(None), "padding": "x" * (2 * limit)})
            for sent in (big, chunks(big)):  # declared, then chunked: was stored, unread
                answer = client.post(path, content=sent, headers=headers)
                assert answer.status_code == 413, answer.text
                assert answer.json()["error"] == "too_large"
            wrong = client.get(path)
            assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")
            assert set(wrong.json()) == ERROR_SHAPE
        # A Content-Length larger than what is sent: what came is read, no more, and refused.
        status, reply = raw_http(
            url,
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {limit}\r\n"
            "Connection: close\r\n\r\n".encode()
            + b"y" * 10,
        )
        assert (status, set(reply)) == (400, ERROR_SHAPE)
    assert RawEvent.objects.count() == 1
    assert UnverifiedRequest.objects.get().body_size == 10


@pytest.mark.slow
def test_with_redis_away_the_limit_holds_per_process_and_nothing_is_a_500(
    transactional_db: None, tmp_path: Path
) -> None:
    acme = notary_services.tenant_create(slug="acme", name="Acme")
    made, secret = make_endpoint(acme, "stripe")
    path = f"/webhooks/{made.public_id}/"
    away = {
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "WEBHOOK_UNVERIFIED_PER_MINUTE": "2",
    }
    with (
        running_notary(child_database_url(), tmp_path, workers=1, settings=away) as url,
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        statuses = [client.post(path, content=b"{}").status_code for _ in range(4)]
        body = body_of(stripe_refund_event(None))
        headers = as_headers(signed_headers("stripe", body, secret))
        real = client.post(path, content=body, headers=headers)
    assert statuses == [400, 400, 429, 429]
    assert real.status_code == 200, real.text
    assert UnverifiedRequest.objects.filter(endpoint=made).count() == 2


# --- Hostile input, generated -----------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**15, max_value=10**30)
    | st.floats()
    | st.text(max_size=40)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_odd_ids = (
    st.none()
    | st.integers()
    | st.text(max_size=300)
    | st.text(min_size=250, max_size=260)
    | st.sampled_from(["", "evt\x00", "\ud800", "None"])
    | _values
)
_header_ids = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    min_size=1,
    max_size=300,
)


@st.composite
def _events(draw: st.DrawFn, effect_id: str) -> Any:
    """Event-shaped objects with fields of every type and size, the real effect id sometimes."""
    ref = draw(st.sampled_from([effect_id]) | _odd_ids)
    obj = {
        "id": draw(_odd_ids | st.just("re_1")),
        "object": draw(st.sampled_from(["refund", "charge"]) | _values),
        "status": draw(st.sampled_from(["succeeded", "failed"]) | _values),
        "metadata": draw(st.fixed_dictionaries({"interlock_effect_id": st.just(ref)}) | _values),
    }
    event = {
        "id": draw(st.text(min_size=1, max_size=20).map("evt_".__add__) | _odd_ids),
        "type": draw(st.sampled_from(["refund.created", "email.sent", "job.done"]) | _values),
        "created": draw(st.integers() | _values),
        "created_at": draw(_values),
        "timestamp": draw(_values),
        "data": {
            "object": obj,
            "email_id": draw(_odd_ids),
            "tags": draw(st.fixed_dictionaries({"interlock_effect_id": st.just(ref)}) | _values),
            "ref": ref,
        },
    }
    return draw(st.just(event) | st.lists(st.just(event), max_size=2) | _values)


def _deep(levels: int, array: bool) -> str:
    """An event holding `levels` arrays or objects nested (`levels` + 1 in all)."""
    opener, closer = ("[", "]") if array else ('{"a":', "}")
    return '{"id": "evt_deep", "v": ' + opener * levels + "1" + closer * levels + "}"


@st.composite
def _bodies(draw: st.DrawFn, effect_id: str) -> bytes:
    """Deep, long and odd bodies, all UTF-8 (the providers' libraries sign text)."""
    kind = draw(st.sampled_from(["event", "deep", "long", "number", "text"]))
    if kind == "deep":
        levels = draw(st.integers(min_value=60, max_value=70) | st.integers(1, 20_000))
        text = _deep(levels, draw(st.booleans()))
    elif kind == "long":
        text = json.dumps({"id": "evt_long", "pad": "x" * draw(st.integers(0, 300_000))})
    elif kind == "number":
        text = '{"id": "evt_n", "created": ' + "9" * draw(st.integers(1, 6000)) + "}"
    elif kind == "text":
        text = draw(st.text(st.characters(exclude_categories=["Cs"]), max_size=200))
    else:
        event = draw(_events(effect_id))
        text = json.dumps(event, ensure_ascii=draw(st.booleans()))
        if not _utf8(text):  # a lone surrogate, unescaped: no library signs that
            text = json.dumps(event)
    return text.encode()


@pytest.mark.parametrize("provider", PROVIDERS)
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_bodies_never_5xx_and_refusals_store_nothing(
    hostile_endpoints: dict[str, tuple[Endpoint, str, str]], provider: str, data: st.DataObject
) -> None:
    made, secret, effect_id = hostile_endpoints[provider]
    body = data.draw(_bodies(effect_id), label="body")
    event_id = data.draw(_header_ids, label="header id")
    before = RawEvent.objects.count()
    answer = signed_post(made, secret, body, event_id=event_id)
    assert answer.status_code < 500, answer.content[:300]
    if answer.status_code == 200:
        stored = RawEvent.objects.get(endpoint=made, provider_event_id=answer.json()["received"])
        assert bytes(stored.body) == body or answer.json()["duplicate"]
        ingestion = services.event_ingest(raw_event_id=stored.pk)  # no poison events
        assert Ingestion.objects.filter(pk=ingestion.pk).exists()
    else:
        assert 400 <= answer.status_code < 500
        assert answer["Content-Type"] == "application/json"
        assert set(answer.json()) == ERROR_SHAPE
        assert RawEvent.objects.count() == before


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@pytest.fixture
def hostile_endpoints(acme: Tenant, settings: Any) -> dict[str, tuple[Endpoint, str, str]]:
    """One endpoint per provider (and an effect to aim at) for all of a test's examples; no
    rate limit, so every example meets the refusal it earns."""
    settings.WEBHOOK_UNVERIFIED_PER_MINUTE = 10**9
    made = {}
    for provider in PROVIDERS:
        endpoint, secret = make_endpoint(acme, provider, target=f"t-{provider}")
        made[provider] = (endpoint, secret, dispatched(acme, f"t-{provider}", "case-1"))
    return made
