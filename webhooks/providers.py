"""What each provider's webhook means: its signature checked by the provider's own library, and
the event read as evidence about one effect. Plain functions of bytes and headers; no database."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import standardwebhooks
import stripe
import svix.webhooks

from ledger.core.entries import format_timestamp

# Signed timestamps further from now than this fail, as replays. Stripe's library takes it as an
# argument (without one it would skip the check); svix and standardwebhooks fix it at 5 minutes.
TOLERANCE_SECONDS = 300

# Headers kept with a raw event: the signature inputs and the content type.
KEPT_HEADERS = (
    "content-type",
    "stripe-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
)

PERFORMED, NOT_PERFORMED, OTHER = "performed", "not_performed", "other"


class VerificationFailed(ValueError):
    """No active secret verifies the request."""


@dataclass(frozen=True)
class Verified:
    event_id: str
    event: dict[str, Any]


@dataclass(frozen=True)
class Observation:
    """One event, as evidence: which effect it speaks of and whether it says the effect was done."""

    provider: str
    event_id: str
    event_type: str
    occurred_at: str
    effect_id: str | None
    result_ref: str | None  # the provider's id of what it did (a refund, an email)
    outcome: str  # PERFORMED, NOT_PERFORMED or OTHER


def verify(
    provider: str, body: bytes, headers: Mapping[str, str], secrets: Sequence[str]
) -> Verified:
    """Check the signature over the exact body with each active secret; the first that verifies
    wins. Every failure, including the bare ValueError and UnicodeDecodeError the libraries raise
    on malformed input, is a VerificationFailed."""
    if not secrets:
        raise VerificationFailed("the endpoint has no active secret")
    failures = []
    for secret in secrets:
        try:
            return _verify_one(provider, body, headers, secret)
        except (
            stripe.SignatureVerificationError,
            standardwebhooks.WebhookVerificationError,
            ValueError,  # UnicodeDecodeError and binascii.Error are ValueErrors too
            KeyError,
            TypeError,
        ) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
    raise VerificationFailed("; ".join(dict.fromkeys(failures)))


def check_secret(provider: str, secret: str) -> None:
    """Raise ValueError unless this is a signing secret as the provider issues them: whsec_,
    then (svix, Standard Webhooks) base64 the library takes."""
    if not secret.startswith("whsec_") or secret == "whsec_":
        raise ValueError(f"a {provider} signing secret starts with whsec_")
    if provider == "stripe":
        return
    try:
        standardwebhooks.Webhook(secret)
    except (ValueError, standardwebhooks.webhooks.EmptyWebhookSecretError) as exc:
        raise ValueError(f"not a {provider} signing secret (whsec_ + base64): {exc}") from exc


def _verify_one(provider: str, body: bytes, headers: Mapping[str, str], secret: str) -> Verified:
    if provider == "stripe":
        stripe.Webhook.construct_event(
            body, headers.get("stripe-signature"), secret, tolerance=TOLERANCE_SECONDS
        )
        event = json_object(body)
        return Verified(str(event["id"]), event)
    if provider == "resend":
        svix.webhooks.Webhook(secret).verify(body, dict(headers))
        return Verified(headers["svix-id"], json_object(body))
    if provider == "standard":
        standardwebhooks.Webhook(secret).verify(body, dict(headers))
        return Verified(headers["webhook-id"], json_object(body))
    raise ValueError(f"unknown provider {provider!r}")


def observe(
    provider: str,
    verified: Verified,
    *,
    effect_id_path: str = "",
    positive_types: Sequence[str] = (),
    negative_types: Sequence[str] = (),
) -> Observation:
    event = verified.event
    event_type = str(event.get("type", ""))
    if provider == "stripe":
        return _stripe(verified.event_id, event, event_type)
    if provider == "resend":
        return _resend(verified.event_id, event, event_type)
    effect_id = _at_path(event, effect_id_path)
    outcome = (
        PERFORMED
        if event_type in positive_types
        else NOT_PERFORMED
        if event_type in negative_types
        else OTHER
    )
    return Observation(
        provider="standard",
        event_id=verified.event_id,
        event_type=event_type,
        occurred_at=str(event.get("timestamp", "")),
        effect_id=effect_id if isinstance(effect_id, str) and effect_id else None,
        result_ref=None,
        outcome=outcome,
    )


_STRIPE_PERFORMED = frozenset({"succeeded", "pending"})
_STRIPE_NOT_PERFORMED = frozenset({"failed", "canceled"})


def _stripe(event_id: str, event: dict[str, Any], event_type: str) -> Observation:
    """A refund event carries the refund, with the metadata the gate put on it."""
    obj = _object(_object(event.get("data")).get("object"))
    metadata = _object(obj.get("metadata"))
    status = obj.get("status")
    if obj.get("object") != "refund" or event_type == "refund.failed":
        outcome = NOT_PERFORMED if event_type == "refund.failed" else OTHER
    else:
        outcome = (
            PERFORMED
            if status in _STRIPE_PERFORMED
            else NOT_PERFORMED
            if status in _STRIPE_NOT_PERFORMED
            else OTHER
        )
    created = event.get("created")
    occurred = (
        format_timestamp(datetime.fromtimestamp(created, UTC)) if isinstance(created, int) else ""
    )
    effect_id = metadata.get("interlock_effect_id")
    return Observation(
        provider="stripe",
        event_id=event_id,
        event_type=event_type,
        occurred_at=occurred,
        effect_id=effect_id if isinstance(effect_id, str) and effect_id else None,
        result_ref=obj.get("id") if isinstance(obj.get("id"), str) else None,
        outcome=outcome,
    )


_RESEND_PERFORMED = frozenset(
    {"email.sent", "email.delivered", "email.opened", "email.clicked", "email.complained"}
)
_RESEND_NOT_PERFORMED = frozenset({"email.bounced", "email.failed"})


def _resend(event_id: str, event: dict[str, Any], event_type: str) -> Observation:
    data = _object(event.get("data"))
    tags = data.get("tags")
    if isinstance(tags, list):  # [{"name": ..., "value": ...}] as sent, or a mapping
        tags = {t.get("name"): t.get("value") for t in tags if isinstance(t, dict)}
    effect_id = _object(tags).get("interlock_effect_id")
    email_id = data.get("email_id")
    return Observation(
        provider="resend",
        event_id=event_id,
        event_type=event_type,
        occurred_at=str(event.get("created_at", "")),
        effect_id=effect_id if isinstance(effect_id, str) and effect_id else None,
        result_ref=email_id if isinstance(email_id, str) else None,
        outcome=(
            PERFORMED
            if event_type in _RESEND_PERFORMED
            else NOT_PERFORMED
            if event_type in _RESEND_NOT_PERFORMED
            else OTHER
        ),
    )


def json_object(body: bytes) -> dict[str, Any]:
    event = json.loads(body)
    if not isinstance(event, dict):
        raise ValueError("the event is not a JSON object")
    return event


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _at_path(event: dict[str, Any], path: str) -> Any:
    value: Any = event
    for part in path.split(".") if path else []:
        value = _object(value).get(part)
    return value
