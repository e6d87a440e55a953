"""Signatures checked by the providers' own libraries over the exact bytes; every way a request
can fail is a VerificationFailed; events are read as evidence about one effect."""

from __future__ import annotations

import time

import pytest

from testkit.webhook_signing import (
    as_headers,
    body_of,
    new_secret,
    resend_event,
    signed_headers,
    stripe_refund_event,
)
from webhooks import providers
from webhooks.providers import (
    NOT_PERFORMED,
    OTHER,
    PERFORMED,
    EventUnreadable,
    VerificationFailed,
)

PROVIDERS = ["stripe", "resend", "standard"]


def sign(provider: str, body: bytes, secret: str, **kwargs: object) -> dict[str, str]:
    return as_headers(signed_headers(provider, body, secret, event_id="msg_1", **kwargs))  # type: ignore[arg-type]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_signed_event_verifies_with_any_active_secret(provider: str) -> None:
    body = body_of(stripe_refund_event("eff_1"))
    old, new = new_secret(provider), new_secret(provider)
    headers = sign(provider, body, new)
    webhook = providers.PROVIDERS[provider]
    verified = webhook.verify(body, headers, [old, new])  # rotation: both active
    assert verified.event == providers.json_object(body)
    with pytest.raises(VerificationFailed):
        webhook.verify(body, headers, [old])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_tampering_fails_verification(provider: str) -> None:
    secret = new_secret(provider)
    body = body_of(stripe_refund_event("eff_1"))
    good = sign(provider, body, secret)
    signature = "stripe-signature" if provider == "stripe" else f"{_prefix(provider)}-signature"
    cases = {
        "another body": (body.replace(b"2000", b"9000"), good),
        "re-serialized json": (body.replace(b"\n", b""), good),
        "stale timestamp": (body, sign(provider, body, secret, at=time.time() - 3600)),
        "future timestamp": (body, sign(provider, body, secret, at=time.time() + 3600)),
        "no signature": (body, {k: v for k, v in good.items() if k != signature}),
        "garbled signature": (body, {**good, signature: "v1"}),
        "signature without comma": (body, {**good, signature: "nonsense"}),
        "bad base64": (body, {**good, signature: "v1,@@@"}),
        "not utf-8": (b"\xff\xfe" + body, good),
        "no headers": (body, {}),
    }
    for why, (sent, headers) in cases.items():
        with pytest.raises(VerificationFailed):
            providers.PROVIDERS[provider].verify(sent, headers, [secret])
            pytest.fail(why)
    with pytest.raises(VerificationFailed, match="no active secret"):
        providers.PROVIDERS[provider].verify(body, good, [])


def test_a_signed_body_that_is_not_json_is_unreadable_not_verified() -> None:
    secret = new_secret("stripe")
    body = b"not json at all"
    with pytest.raises(EventUnreadable, match="not JSON"):
        providers.PROVIDERS["stripe"].verify(body, sign("stripe", body, secret), [secret])


@pytest.mark.parametrize(
    ("status", "event_type", "outcome"),
    [
        ("succeeded", "refund.created", PERFORMED),
        ("pending", "refund.created", PERFORMED),
        ("failed", "refund.updated", NOT_PERFORMED),
        ("canceled", "refund.updated", NOT_PERFORMED),
        ("failed", "refund.failed", NOT_PERFORMED),
        ("requires_action", "refund.updated", OTHER),
    ],
)
def test_stripe_refund_events_as_evidence(status: str, event_type: str, outcome: str) -> None:
    event = stripe_refund_event("eff_1", status=status, event_type=event_type)
    seen = providers.PROVIDERS["stripe"].observe(providers.Verified(event["id"], event))
    assert (seen.effect_id, seen.outcome, seen.event_type) == ("eff_1", outcome, event_type)
    assert seen.result_ref == event["data"]["object"]["id"]
    assert seen.occurred_at.endswith("Z")


@pytest.mark.parametrize(
    ("event_type", "outcome"),
    [
        ("email.sent", PERFORMED),
        ("email.delivered", PERFORMED),
        ("email.bounced", NOT_PERFORMED),
        ("email.delivery_delayed", OTHER),
    ],
)
def test_resend_events_as_evidence(event_type: str, outcome: str) -> None:
    resend = providers.PROVIDERS["resend"]
    tagged = resend_event(event_type, effect_id="eff_2", email_id="em_1")
    seen = resend.observe(providers.Verified("msg_1", tagged))
    assert (seen.effect_id, seen.result_ref, seen.outcome) == ("eff_2", "em_1", outcome)
    listed = {
        **tagged,
        "data": {**tagged["data"], "tags": [{"name": "interlock_effect_id", "value": "eff_2"}]},
    }
    assert resend.observe(providers.Verified("m", listed)).effect_id == "eff_2"
    untagged = resend_event(event_type, email_id="em_1")
    assert resend.observe(providers.Verified("m", untagged)).effect_id is None


def test_standard_events_follow_the_endpoints_configuration() -> None:
    event = {
        "type": "job.done",
        "timestamp": "2026-11-29T23:00:00Z",
        "data": {"ref": {"eff": "eff_3"}},
    }
    seen = providers.PROVIDERS["standard"].observe(
        providers.Verified("msg_1", event),
        effect_id_path="data.ref.eff",
        positive_types=["job.done"],
        negative_types=["job.failed"],
    )
    assert (seen.effect_id, seen.outcome) == ("eff_3", PERFORMED)
    missing = providers.PROVIDERS["standard"].observe(
        providers.Verified("m", event), effect_id_path="data.nope"
    )
    assert missing.effect_id is None
    assert missing.outcome == OTHER


@pytest.mark.parametrize("provider", PROVIDERS)
def test_malformed_secrets_are_refused_before_use(provider: str) -> None:
    providers.PROVIDERS[provider].check_secret(new_secret(provider))
    for bad in ("", "whsec_", "plain-text", "whsec_***"):
        if provider == "stripe" and bad.startswith("whsec_"):
            continue  # Stripe's secrets are opaque past their prefix
        with pytest.raises(ValueError):
            providers.PROVIDERS[provider].check_secret(bad)


def _prefix(provider: str) -> str:
    return "svix" if provider == "resend" else "webhook"
