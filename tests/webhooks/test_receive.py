"""POST /webhooks/<endpoint id>/: the raw body verified, every verified event stored as it came,
a bad signature a 400 that becomes no evidence (quarantined, not stored), a replayed event id a
2xx that adds nothing."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notary.models import Tenant
from testkit.factories import dispatched, register
from testkit.webhook_signing import body_of, new_secret, signed_headers, stripe_refund_event
from webhooks import selectors, services
from webhooks.models import Endpoint, EndpointSecret, Ingestion, RawEvent, UnverifiedRequest

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(acme: Tenant) -> tuple[Endpoint, str]:
    target = register(acme, "refunds")
    secret = new_secret("stripe")
    made = services.endpoint_create(tenant=acme, target=target, provider="stripe", secrets=[secret])
    return made, secret


def post(endpoint: Endpoint, body: bytes, headers: dict[str, Any]) -> Any:
    client = Client(enforce_csrf_checks=True)  # providers have no CSRF token: the view is exempt
    return client.post(
        f"/webhooks/{endpoint.public_id}/", data=body, content_type="application/json", **headers
    )


def test_a_signed_event_is_stored_byte_for_byte_and_ingested_on_commit(
    endpoint: tuple[Endpoint, str],
    acme: Tenant,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    made, secret = endpoint
    effect_id = dispatched(acme, "refunds", "case-1")
    event = stripe_refund_event(effect_id)
    body = body_of(event)
    with django_capture_on_commit_callbacks(execute=True) as queued:
        answer = post(made, body, signed_headers("stripe", body, secret))
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"received": event["id"], "duplicate": False}
    assert len(queued) == 1
    stored = RawEvent.objects.get(provider_event_id=event["id"])
    assert bytes(stored.body) == body
    assert stored.verified is True
    assert "stripe-signature" in stored.headers
    assert Ingestion.objects.get(raw_event=stored).outcome == "committed_on_evidence"


def test_a_replayed_event_answers_2xx_and_adds_nothing(
    endpoint: tuple[Endpoint, str], acme: Tenant
) -> None:
    made, secret = endpoint
    body = body_of(stripe_refund_event(None))
    headers = signed_headers("stripe", body, secret)
    assert post(made, body, headers).json()["duplicate"] is False
    again = post(made, body, signed_headers("stripe", body, secret))
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert RawEvent.objects.filter(verified=True).count() == 1


def test_a_bad_signature_is_a_400_quarantined_and_claims_no_id(
    endpoint: tuple[Endpoint, str],
) -> None:
    made, secret = endpoint
    event = stripe_refund_event(None)
    body = body_of(event)
    forged = post(made, body, signed_headers("stripe", body, new_secret("stripe")))
    assert forged.status_code == 400
    assert forged.json()["error"] == "signature"
    assert not RawEvent.objects.exists()  # the append-only table takes verified events only
    assert UnverifiedRequest.objects.get(endpoint=made).reason == "signature"
    assert not Ingestion.objects.exists()
    real = post(made, body, signed_headers("stripe", body, secret))  # the same id, now signed
    assert real.status_code == 200
    assert real.json()["duplicate"] is False


def test_unknown_endpoints_wrong_methods_and_oversized_bodies_are_refused(
    endpoint: tuple[Endpoint, str], settings: Any
) -> None:
    made, secret = endpoint
    settings.WEBHOOK_MAX_BODY_BYTES = 100
    body = body_of(stripe_refund_event(None))
    assert post(made, body, signed_headers("stripe", body, secret)).status_code == 413
    client = Client()
    wrong_method = client.get(f"/webhooks/{made.public_id}/")
    assert wrong_method.status_code == 405
    assert wrong_method["Allow"] == "POST"
    assert set(wrong_method.json()) == {"error", "detail"}
    assert client.post("/webhooks/not-a-uuid/", data=b"{}", content_type="x").status_code == 404
    assert (
        client.post(
            "/webhooks/00000000-0000-0000-0000-000000000000/", data=b"{}", content_type="x"
        ).status_code
        == 404
    )
    assert not RawEvent.objects.exists()


def test_the_receivers_read_is_the_endpoint_as_the_orm_reads_it_with_its_active_secrets(
    acme: Tenant, globex: Tenant
) -> None:
    older, retired, newer = new_secret("resend"), new_secret("resend"), new_secret("resend")
    made = services.endpoint_create(
        tenant=acme,
        target=register(acme, "mail"),
        provider="resend",
        secrets=[older, retired, newer],
    )
    services.endpoint_create(
        tenant=globex, target=register(globex, "mail"), provider="stripe", secrets=["whsec_g"]
    )
    EndpointSecret.objects.filter(secret=retired).update(retired_at=timezone.now())
    found = selectors.endpoint_for_url(public_id=str(made.public_id))
    assert found is not None
    endpoint, secrets = found
    assert secrets == [older, newer]
    stored = Endpoint.objects.get(pk=made.pk)
    for field in Endpoint._meta.concrete_fields:  # those not read load when first used
        assert getattr(endpoint, field.attname) == getattr(stored, field.attname), field.name
    assert (endpoint.tenant, endpoint.target.name) == (acme, "mail")
    EndpointSecret.objects.filter(endpoint=made).update(retired_at=timezone.now())
    assert selectors.endpoint_for_url(public_id=str(made.public_id)) == (endpoint, [])
    assert selectors.endpoint_for_url(public_id="00000000-0000-0000-0000-000000000000") is None
    assert selectors.endpoint_for_url(public_id="not-a-uuid") is None


def test_a_remembered_endpoint_stores_with_one_insert_that_checks_the_secret_is_active(
    endpoint: tuple[Endpoint, str],
) -> None:
    made, old = endpoint
    body = body_of(stripe_refund_event(None))
    assert post(made, body, signed_headers("stripe", body, old)).status_code == 200
    body = body_of(stripe_refund_event(None))
    with CaptureQueriesContext(connection) as ran:  # remembered: no read of the endpoint
        assert post(made, body, signed_headers("stripe", body, old)).status_code == 200
    assert [query["sql"].split()[0] for query in ran] == ["INSERT"]
    # Rotated in the database, behind the process's back: the old secret is refused, the new
    # one taken, a replay still a replay.
    new = new_secret("stripe")
    EndpointSecret.objects.filter(endpoint=made).update(retired_at=timezone.now())
    EndpointSecret.objects.create(endpoint=made, secret=new)
    stale = body_of(stripe_refund_event(None))
    refused = post(made, stale, signed_headers("stripe", stale, old))
    assert refused.status_code == 400
    assert refused.json()["error"] == "signature"
    assert UnverifiedRequest.objects.get(endpoint=made).reason == "signature"
    fresh = body_of(stripe_refund_event(None))
    assert post(made, fresh, signed_headers("stripe", fresh, new)).json()["duplicate"] is False
    assert post(made, fresh, signed_headers("stripe", fresh, new)).json()["duplicate"] is True
    assert RawEvent.objects.count() == 3


def test_a_remembered_endpoint_removed_since_is_a_404(acme: Tenant) -> None:
    secret = new_secret("resend")
    made = services.endpoint_create(
        tenant=acme, target=register(acme, "mail"), provider="resend", secrets=[secret]
    )
    body = body_of({"type": "email.sent", "data": {"email_id": "em_1"}})
    headers = signed_headers("resend", body, new_secret("resend"), event_id="msg_1")
    assert post(made, body, headers).status_code == 400  # read, and remembered
    EndpointSecret.objects.filter(endpoint=made).delete()
    Endpoint.objects.filter(pk=made.pk).delete()
    for signed_by in (secret, new_secret("resend")):
        gone = post(made, body, signed_headers("resend", body, signed_by, event_id="msg_1"))
        assert gone.status_code == 404
        assert gone.json()["error"] == "not_found"
    assert not RawEvent.objects.exists()


def test_raw_events_and_ingestions_cannot_be_changed_or_deleted(
    endpoint: tuple[Endpoint, str],
) -> None:
    made, secret = endpoint
    body = body_of(stripe_refund_event(None))
    post(made, body, signed_headers("stripe", body, secret))
    stored = RawEvent.objects.get()
    for change in (
        lambda: RawEvent.objects.filter(pk=stored.pk).update(body=b"{}"),
        lambda: RawEvent.objects.filter(pk=stored.pk).delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            change()
    assert bytes(RawEvent.objects.get().body) == body


def test_endpoints_refuse_bad_setups(acme: Tenant, globex: Tenant) -> None:
    theirs = register(globex, "mail")
    mine = register(acme, "mail")
    with pytest.raises(services.WebhookInputError, match="another tenant"):
        services.endpoint_create(tenant=acme, target=theirs, provider="stripe", secrets=["whsec_x"])
    with pytest.raises(services.WebhookInputError, match="provider"):
        services.endpoint_create(tenant=acme, target=mine, provider="paypal", secrets=["whsec_x"])
    with pytest.raises(services.WebhookInputError, match="secret"):
        services.endpoint_create(tenant=acme, target=mine, provider="resend", secrets=[])
    with pytest.raises(services.WebhookInputError, match="whsec_"):
        services.endpoint_create(tenant=acme, target=mine, provider="resend", secrets=["nope"])
    with pytest.raises(services.WebhookInputError, match="effect_id_path"):
        services.endpoint_create(
            tenant=acme, target=mine, provider="standard", secrets=[new_secret("standard")]
        )
    assert not Endpoint.objects.exists()


def test_the_command_creates_an_endpoint_a_provider_can_post_to(acme: Tenant) -> None:
    register(acme, "mail")
    secret = new_secret("resend")
    out = io.StringIO()
    call_command(
        "create_webhook_endpoint",
        tenant="acme",
        target="mail",
        provider="resend",
        secret=[secret],
        stdout=out,
    )
    path = out.getvalue().strip()
    body = body_of({"type": "email.sent", "data": {"email_id": "em_1"}})
    headers: dict[str, Any] = signed_headers("resend", body, secret, event_id="msg_1")
    answer = Client().post(path, data=body, content_type="application/json", **headers)
    assert answer.status_code == 200, answer.content
    with pytest.raises(CommandError, match="no target 'nope'"):
        call_command(
            "create_webhook_endpoint", tenant="acme", target="nope", provider="resend", secret=["x"]
        )
