"""What each provider's webhook means: its signature checked by the provider's own library, and
the event read as evidence about one effect. One class per provider, found in PROVIDERS by the
endpoint's provider; plain code of bytes and headers, no database."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import standardwebhooks
import stripe
import svix.webhooks

from ledger.core.entries import format_timestamp
from webhooks.models import Provider

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


class WebhookProvider(ABC):
    """One provider's webhooks: the secrets it issues, its signature over the exact body, and
    what its events say about an effect."""

    name: ClassVar[str]
    # Whether an event naming no effect is matched by result_ref, the provider's id of what it
    # did that the gate committed.
    matches_result_ref: ClassVar[bool] = False

    def check_secret(self, secret: str) -> None:
        """Raise ValueError unless this is a signing secret as the provider issues them."""
        if not secret.startswith("whsec_") or secret == "whsec_":
            raise ValueError(f"a {self.name} signing secret starts with whsec_")

    def endpoint_refusal(self, *, effect_id_path: str) -> str | None:
        """Why an endpoint so configured could not read this provider's events, or None."""
        return None

    def verify(self, body: bytes, headers: Mapping[str, str], secrets: Sequence[str]) -> Verified:
        """Check the signature over the exact body with each active secret; the first that
        verifies wins. Every failure, including the bare ValueError and UnicodeDecodeError the
        libraries raise on malformed input, is a VerificationFailed."""
        if not secrets:
            raise VerificationFailed("the endpoint has no active secret")
        failures = []
        for secret in secrets:
            try:
                return self.verify_one(body, headers, secret)
            except (
                stripe.SignatureVerificationError,
                standardwebhooks.WebhookVerificationError,
                ValueError,  # UnicodeDecodeError and binascii.Error are ValueErrors too
                KeyError,
                TypeError,
            ) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
        raise VerificationFailed("; ".join(dict.fromkeys(failures)))

    @abstractmethod
    def verify_one(self, body: bytes, headers: Mapping[str, str], secret: str) -> Verified:
        """The event, if this secret signed the body; else the provider library's error."""

    @abstractmethod
    def observe(
        self,
        verified: Verified,
        *,
        effect_id_path: str = "",
        positive_types: Sequence[str] = (),
        negative_types: Sequence[str] = (),
    ) -> Observation:
        """The event as evidence; the endpoint's configuration is read by providers whose events
        have no fixed shape."""


class Stripe(WebhookProvider):
    """Stripe-Signature, checked by the stripe library; refund events carry the refund, with
    the metadata the gate put on it. Its secrets are opaque past their prefix."""

    name = Provider.STRIPE.value

    def verify_one(self, body: bytes, headers: Mapping[str, str], secret: str) -> Verified:
        stripe.Webhook.construct_event(
            body, headers.get("stripe-signature"), secret, tolerance=TOLERANCE_SECONDS
        )
        event = json_object(body)
        return Verified(str(event["id"]), event)

    def observe(
        self,
        verified: Verified,
        *,
        effect_id_path: str = "",
        positive_types: Sequence[str] = (),
        negative_types: Sequence[str] = (),
    ) -> Observation:
        event = verified.event
        event_type = str(event.get("type", ""))
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
            format_timestamp(datetime.fromtimestamp(created, UTC))
            if isinstance(created, int)
            else ""
        )
        effect_id = metadata.get("interlock_effect_id")
        return Observation(
            provider=self.name,
            event_id=verified.event_id,
            event_type=event_type,
            occurred_at=occurred,
            effect_id=effect_id if isinstance(effect_id, str) and effect_id else None,
            result_ref=obj.get("id") if isinstance(obj.get("id"), str) else None,
            outcome=outcome,
        )


class Resend(WebhookProvider):
    """svix-* headers, checked by the svix library; an email event carries the gate's tags and
    the email id, which names the effect when the tags do not."""

    name = Provider.RESEND.value
    matches_result_ref = True

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        _check_base64_secret(self.name, secret)

    def verify_one(self, body: bytes, headers: Mapping[str, str], secret: str) -> Verified:
        svix.webhooks.Webhook(secret).verify(body, dict(headers))
        return Verified(headers["svix-id"], json_object(body))

    def observe(
        self,
        verified: Verified,
        *,
        effect_id_path: str = "",
        positive_types: Sequence[str] = (),
        negative_types: Sequence[str] = (),
    ) -> Observation:
        event = verified.event
        event_type = str(event.get("type", ""))
        data = _object(event.get("data"))
        tags = data.get("tags")
        if isinstance(tags, list):  # [{"name": ..., "value": ...}] as sent, or a mapping
            tags = {t.get("name"): t.get("value") for t in tags if isinstance(t, dict)}
        effect_id = _object(tags).get("interlock_effect_id")
        email_id = data.get("email_id")
        return Observation(
            provider=self.name,
            event_id=verified.event_id,
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


class StandardWebhooks(WebhookProvider):
    """webhook-* headers, checked by the standardwebhooks library; the events have no fixed
    shape, so the endpoint says where the effect id sits and which types say what."""

    name = Provider.STANDARD.value

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        _check_base64_secret(self.name, secret)

    def endpoint_refusal(self, *, effect_id_path: str) -> str | None:
        return None if effect_id_path else "a Standard Webhooks endpoint needs effect_id_path"

    def verify_one(self, body: bytes, headers: Mapping[str, str], secret: str) -> Verified:
        standardwebhooks.Webhook(secret).verify(body, dict(headers))
        return Verified(headers["webhook-id"], json_object(body))

    def observe(
        self,
        verified: Verified,
        *,
        effect_id_path: str = "",
        positive_types: Sequence[str] = (),
        negative_types: Sequence[str] = (),
    ) -> Observation:
        event = verified.event
        event_type = str(event.get("type", ""))
        effect_id = _at_path(event, effect_id_path)
        outcome = (
            PERFORMED
            if event_type in positive_types
            else NOT_PERFORMED
            if event_type in negative_types
            else OTHER
        )
        return Observation(
            provider=self.name,
            event_id=verified.event_id,
            event_type=event_type,
            occurred_at=str(event.get("timestamp", "")),
            effect_id=effect_id if isinstance(effect_id, str) and effect_id else None,
            result_ref=None,
            outcome=outcome,
        )


# Every provider an endpoint can name, by its Provider value.
PROVIDERS: Mapping[str, WebhookProvider] = {
    provider.name: provider for provider in (Stripe(), Resend(), StandardWebhooks())
}

_STRIPE_PERFORMED = frozenset({"succeeded", "pending"})
_STRIPE_NOT_PERFORMED = frozenset({"failed", "canceled"})
_RESEND_PERFORMED = frozenset(
    {"email.sent", "email.delivered", "email.opened", "email.clicked", "email.complained"}
)
_RESEND_NOT_PERFORMED = frozenset({"email.bounced", "email.failed"})


def _check_base64_secret(provider: str, secret: str) -> None:
    """svix and Standard Webhooks secrets are whsec_ then base64 the library takes."""
    try:
        standardwebhooks.Webhook(secret)
    except (ValueError, standardwebhooks.webhooks.EmptyWebhookSecretError) as exc:
        raise ValueError(f"not a {provider} signing secret (whsec_ + base64): {exc}") from exc


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
