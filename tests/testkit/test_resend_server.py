"""The local Resend keeps Resend's documented contract, as the official `resend` SDK sees it: the
adapter's tests are only as good as this peer is faithful."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import resend
import svix.webhooks
from resend.exceptions import ResendError

from testkit.peers.resend_server import RunningResend, running_resend

SECRET = "whsec_" + base64.b64encode(b"interlock-resend-peer-test-key").decode()


def params(**overrides: Any) -> Any:
    """A valid send request (the SDK's TypedDict, as the adapter builds it)."""
    return {
        "from": "Interlock <gate@example.com>",
        "to": ["ada@customer.test"],
        "subject": "Your refund",
        "text": "It is on its way.",
        "tags": [{"name": "interlock_effect", "value": "eff_1"}],
        **overrides,
    }


def send(key: str | None = None, **overrides: Any) -> str:
    options: Any = None if key is None else {"idempotency_key": key}
    return str(resend.Emails.send(params(**overrides), options=options)["id"])


def refusal(key: str | None = None, **overrides: Any) -> ResendError:
    with pytest.raises(ResendError) as caught:
        send(key, **overrides)
    return caught.value


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def sdk() -> Iterator[None]:
    """The SDK is configured through module globals: set them, and put them back."""
    saved = resend.api_key, resend.api_url
    resend.api_key = "re_test"
    yield
    resend.api_key, resend.api_url = saved


@contextmanager
def resend_at(store: Path, **options: Any) -> Iterator[RunningResend]:
    """The server, with the SDK pointed at it."""
    with running_resend(store, **options) as server:
        resend.api_url = server.url
        yield server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningResend]:
    with resend_at(tmp_path / "emails.jsonl") as running:
        yield running


def test_a_send_stores_exactly_one_email_with_its_tags(server: RunningResend) -> None:
    email_id = send("k-1")

    [email] = server.emails()
    assert email["id"] == email_id
    assert email["idempotency_key"] == "k-1"
    assert email["tags"] == [{"name": "interlock_effect", "value": "eff_1"}]
    assert server.emails(tag=("interlock_effect", "eff_1")) == [email]
    assert server.emails(tag=("interlock_effect", "eff_2")) == []


def test_the_same_key_and_body_replay_the_first_id(server: RunningResend) -> None:
    first = send("k-1")

    assert send("k-1") == first
    assert [e["id"] for e in server.emails()] == [first]


def test_the_same_key_with_another_body_is_refused(server: RunningResend) -> None:
    send("k-1")

    error = refusal("k-1", subject="Another subject")

    assert (error.code, error.error_type) == (409, "invalid_idempotent_request")
    assert len(server.emails()) == 1


def test_a_concurrent_duplicate_is_refused_while_the_first_is_in_flight(tmp_path: Path) -> None:
    with resend_at(tmp_path / "emails.jsonl", send_delay_seconds=1.0) as server:
        start = threading.Barrier(2)
        ids: list[str] = []
        errors: list[ResendError] = []

        def attempt() -> None:
            start.wait()
            try:
                ids.append(send("k-1"))
            except ResendError as error:
                errors.append(error)

        threads = [threading.Thread(target=attempt) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert len(ids) == 1
        assert [(e.code, e.error_type) for e in errors] == [(409, "concurrent_idempotent_requests")]
        assert [e["id"] for e in server.emails()] == ids


def test_a_key_is_forgotten_after_the_key_window(tmp_path: Path) -> None:
    with resend_at(tmp_path / "emails.jsonl", key_window_seconds=1.5) as server:
        first = send("k-1")
        assert send("k-1") == first  # still within the window
        time.sleep(1.6)

        second = send("k-1")

        assert second != first
        assert [e["id"] for e in server.emails(idempotency_key="k-1")] == [first, second]


def test_an_unverified_sender_sends_nothing_and_leaves_the_key_unused(
    server: RunningResend,
) -> None:
    error = refusal("k-1", **{"from": "Interlock <gate@unverified.test>"})

    assert (error.code, error.error_type) == (403, "validation_error")
    assert error.message == (
        "The unverified.test domain is not verified. Please, add and verify your domain on "
        "https://resend.com/domains"
    )
    assert server.emails() == []
    email_id = send("k-1")  # the key was never used: this is a new send, not a 409
    assert [e["id"] for e in server.emails(idempotency_key="k-1")] == [email_id]


def test_the_probe_a_used_key_with_an_unverified_sender_is_409(server: RunningResend) -> None:
    """The idempotency check comes before the domain check: a probe that can never send tells a
    used key (409) from a fresh one (403)."""
    send("k-used")

    used = refusal("k-used", **{"from": "probe@unverified.test"})
    fresh = refusal("k-fresh", **{"from": "probe@unverified.test"})

    assert (used.code, used.error_type) == (409, "invalid_idempotent_request")
    assert (fresh.code, fresh.error_type) == (403, "validation_error")
    assert len(server.emails()) == 1


def test_a_body_refused_by_validation_leaves_the_key_unused(server: RunningResend) -> None:
    missing = refusal("k-1", subject=None)
    bad_tag = refusal("k-1", tags=[{"name": "has space", "value": "v"}])
    bad_from = refusal("k-1", **{"from": "not an address"})
    too_many = refusal("k-1", to=[f"r{i}@customer.test" for i in range(51)])
    validated_first = refusal("x" * 257, subject=None)  # the body, then the key

    assert (missing.code, missing.error_type) == (422, "missing_required_field")
    for error in (bad_tag, bad_from, too_many):
        assert (error.code, error.error_type) == (422, "validation_error")
    assert (validated_first.code, validated_first.error_type) == (422, "missing_required_field")
    assert server.emails() == []
    send("k-1")
    assert len(server.emails(idempotency_key="k-1")) == 1


def test_an_empty_or_too_long_key_is_400(server: RunningResend) -> None:
    for key in ("", "k" * 257):
        error = refusal(key)
        assert (error.code, error.error_type) == (400, "invalid_idempotency_key")
    send("k" * 256)
    assert len(server.emails()) == 1


def test_bad_json_is_400(server: RunningResend) -> None:
    response = httpx.post(
        f"{server.url}/emails",
        content=b"{not json",
        headers={"Authorization": "Bearer re_test", "Content-Type": "application/json"},
    )

    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["name"] == "validation_error"


def test_auth_comes_first(server: RunningResend) -> None:
    bare = httpx.post(f"{server.url}/emails", json=params())
    resend.api_key = ""
    missing = refusal("k-1")
    resend.api_key = "sk_not_resend"
    invalid = refusal("k-1")

    assert bare.status_code == 401
    assert bare.json() == {**bare.json(), "statusCode": 401, "name": "missing_api_key"}
    assert (missing.code, missing.error_type) == (401, "missing_api_key")
    assert (invalid.code, invalid.error_type) == (403, "invalid_api_key")
    with pytest.raises(ResendError) as caught:
        resend.Emails.list()
    assert caught.value.error_type == "invalid_api_key"
    assert server.emails() == []


def test_a_restart_keeps_the_emails_and_the_keys(tmp_path: Path) -> None:
    store = tmp_path / "emails.jsonl"
    with resend_at(store):
        first = send("k-1")

    with resend_at(store) as server:
        assert send("k-1") == first
        assert refusal("k-1", subject="Another").code == 409
        assert resend.Emails.get(first)["id"] == first
        assert len(server.emails()) == 1


def test_an_email_reads_back_with_its_tags_and_the_list_without(server: RunningResend) -> None:
    older = send(subject="Older")
    newer = send(to="grace@customer.test", subject="Newer", html="<p>Hi</p>")

    email: Any = resend.Emails.get(newer)  # the SDK's TypedDict lacks `object` and `tags`
    listed = resend.Emails.list({"limit": 1})

    assert email["object"] == "email"
    assert email["to"] == ["grace@customer.test"]
    assert (email["subject"], email["html"]) == ("Newer", "<p>Hi</p>")
    assert email["tags"] == [{"name": "interlock_effect", "value": "eff_1"}]
    assert email["last_event"] in ("sent", "delivered")
    assert email["created_at"].endswith("+00:00")
    assert listed["object"] == "list"
    assert listed["has_more"] is True
    [item] = listed["data"]
    assert item["id"] == newer
    assert "tags" not in item
    assert [e["id"] for e in resend.Emails.list()["data"]] == [newer, older]
    with pytest.raises(ResendError) as caught:
        resend.Emails.get("00000000-0000-0000-0000-000000000000")
    assert (caught.value.code, caught.value.error_type) == (404, "not_found")


@dataclass
class Endpoint:
    """A webhook endpoint: each attempt that reached it, and whether its signature held."""

    url: str
    attempts: list[tuple[dict[str, str], dict[str, Any], bool]] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        return [event for _, event, verified in self.attempts if verified]


@contextmanager
def webhook_endpoint(*, failing_first: int = 0) -> Iterator[Endpoint]:
    """An endpoint that verifies each delivery with Svix's own library and answers 500 to the
    first `failing_first` of them."""

    class Receive(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                svix.webhooks.Webhook(SECRET).verify(body, headers)
                verified = True
            except svix.webhooks.WebhookVerificationError:
                verified = False
            endpoint.attempts.append((headers, json.loads(body), verified))
            failing = len(endpoint.attempts) <= failing_first or not verified
            self.send_response(500 if failing else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receive)
    endpoint = Endpoint(f"http://127.0.0.1:{receiver.server_address[1]}/webhooks/resend")
    threading.Thread(target=receiver.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield endpoint
    finally:
        receiver.shutdown()
        receiver.server_close()


@contextmanager
def resend_with_webhooks(tmp_path: Path, endpoint: Endpoint) -> Iterator[RunningResend]:
    with resend_at(
        tmp_path / "emails.jsonl",
        webhook_url=endpoint.url,
        webhook_secret=SECRET,
        webhook_delay_seconds=0.05,
    ) as server:
        yield server


def test_webhooks_arrive_signed_sent_then_delivered_or_bounced(tmp_path: Path) -> None:
    with webhook_endpoint() as endpoint, resend_with_webhooks(tmp_path, endpoint) as server:
        delivered = send("k-1")
        bounced = send("k-2", to=["Bounce <bounced@resend.dev>"])
        wait_for(lambda: len(endpoint.events()) == 4 and len(server.deliveries()) == 4)

        assert all(verified for _, _, verified in endpoint.attempts)
        by_email: dict[str, list[str]] = {}
        for event in endpoint.events():
            by_email.setdefault(event["data"]["email_id"], []).append(event["type"])
        assert by_email == {
            delivered: ["email.sent", "email.delivered"],
            bounced: ["email.sent", "email.bounced"],
        }
        sent = next(e for e in endpoint.events() if e["data"]["email_id"] == delivered)
        assert sent["data"]["tags"] == {"interlock_effect": "eff_1"}
        assert sent["data"]["to"] == ["ada@customer.test"]
        assert resend.Emails.get(delivered)["last_event"] == "delivered"
        assert resend.Emails.get(bounced)["last_event"] == "bounced"
        assert [d["outcome"] for d in server.deliveries()] == ["ok"] * 4


def test_a_failed_delivery_is_retried_under_the_same_message_id(tmp_path: Path) -> None:
    with (
        webhook_endpoint(failing_first=1) as endpoint,
        resend_with_webhooks(tmp_path, endpoint) as server,
    ):
        send("k-1")
        # The server logs a delivery once its answer is back, after the endpoint has it.
        wait_for(lambda: len(endpoint.events()) == 3 and len(server.deliveries()) == 3)

        first, retry = endpoint.attempts[:2]
        assert first[1] == retry[1]
        assert first[0]["svix-id"] == retry[0]["svix-id"]
        assert [(d["type"], d["attempt"], d["status"]) for d in server.deliveries()] == [
            ("email.sent", 1, 500),
            ("email.sent", 2, 200),
            ("email.delivered", 1, 200),
        ]


def test_withheld_webhooks_never_arrive(tmp_path: Path) -> None:
    with webhook_endpoint() as endpoint, resend_with_webhooks(tmp_path, endpoint) as server:
        server.set_webhooks(deliver=False)
        withheld = send("k-1")
        wait_for(lambda: len(server.deliveries()) == 2)

        assert endpoint.attempts == []
        assert [(d["type"], d["outcome"]) for d in server.deliveries()] == [
            ("email.sent", "withheld"),
            ("email.delivered", "withheld"),
        ]
        assert resend.Emails.get(withheld)["last_event"] == "delivered"  # it happened all the same

        server.set_webhooks(deliver=True)
        arrived = send("k-2")
        wait_for(lambda: len(endpoint.events()) == 2)
        assert {e["data"]["email_id"] for e in endpoint.events()} == {arrived}
