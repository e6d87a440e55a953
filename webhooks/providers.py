"""What each provider's webhook means: its signature checked by the provider's own library, and
the event read as evidence about one effect. One class per provider, found in PROVIDERS by the
endpoint's provider; plain code of bytes and headers, no database."""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import standardwebhooks
import stripe
import svix.webhooks

from ledger.core.canonical import MAX_DEPTH, CanonicalJSONError, check_depth
from ledger.core.entries import MAX_EFFECT_ID_LENGTH, format_timestamp
from webhooks.models import MAX_EVENT_ID_LENGTH, Provider, Refusal

# Signed timestamps further from now than this, either way, fail as replays. Stripe's library
# takes it as an argument and checks only the past side (without one it would skip the check), so
# the future side is checked here; svix and standardwebhooks fix it at 5 minutes both ways.
TOLERANCE_SECONDS = 300
# The longest text an event contributes to its evidence (types, references, times); longer is
# read as absent, as is text PostgreSQL or canonical JSON cannot hold (NUL, lone surrogates).
MAX_EVIDENCE_TEXT = 255

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


class RequestRefused(ValueError):
    """The request is not a verified event; `reason` says which way (a Refusal value)."""

    reason: ClassVar[str]


class VerificationFailed(RequestRefused):
    """No active secret verifies the request."""

    reason = Refusal.SIGNATURE.value


class EventUnreadable(RequestRefused):
    """The signature verifies, but the body is not an event the notary can keep: not a JSON
    object, nested deeper than MAX_DEPTH, or without a usable event id."""

    reason = Refusal.EVENT.value


@dataclass(frozen=True)
class Verified:
    event_id: str
    event: dict[str, Any]
    secret: str = ""  # the active secret that verified it ("" for an event read back)


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
        verifies wins, and then the body is read as an event. Every signature failure,
        including the bare ValueError and UnicodeDecodeError the libraries raise on malformed
        input, is a VerificationFailed; a signed body that is no event is EventUnreadable."""
        if not secrets:
            raise VerificationFailed("the endpoint has no active secret")
        failures = []
        for secret in secrets:
            try:
                self.check_signature(body, headers, secret)
            except (
                stripe.SignatureVerificationError,
                standardwebhooks.WebhookVerificationError,
                ValueError,  # UnicodeDecodeError and binascii.Error are ValueErrors too
                KeyError,
                TypeError,
            ) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            else:
                event = json_object(body)
                return Verified(_event_id(self.event_id_of(event, headers)), event, secret)
        raise VerificationFailed("; ".join(dict.fromkeys(failures)))

    @abstractmethod
    def check_signature(self, body: bytes, headers: Mapping[str, str], secret: str) -> None:
        """Return if this secret signed the body; else raise the provider library's error.
        Signature only: the body is parsed once, by json_object, under the depth limit."""

    @abstractmethod
    def event_id_of(self, event: dict[str, Any], headers: Mapping[str, str]) -> object:
        """The provider's id of the event, as sent (checked by the caller)."""

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

    def check_signature(self, body: bytes, headers: Mapping[str, str], secret: str) -> None:
        header = headers.get("stripe-signature")
        stripe.WebhookSignature.verify_header(body, header, secret, tolerance=TOLERANCE_SECONDS)
        # The library refuses only the past side; a signature from the future is a replay too.
        signed_at = _stripe_timestamp(header or "")  # verify_header refused a missing header
        if signed_at > time.time() + TOLERANCE_SECONDS:
            raise stripe.SignatureVerificationError(  # type: ignore[no-untyped-call]
                f"Timestamp too far in the future ({signed_at})", header
            )

    def event_id_of(self, event: dict[str, Any], headers: Mapping[str, str]) -> object:
        return event.get("id")

    def observe(
        self,
        verified: Verified,
        *,
        effect_id_path: str = "",
        positive_types: Sequence[str] = (),
        negative_types: Sequence[str] = (),
    ) -> Observation:
        event = verified.event
        event_type = _text(event.get("type"))
        obj = _object(_object(event.get("data")).get("object"))
        metadata = _object(obj.get("metadata"))
        status = _text(obj.get("status"))
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
        return Observation(
            provider=self.name,
            event_id=verified.event_id,
            event_type=event_type,
            occurred_at=_unix_time(event.get("created")),
            effect_id=_effect_id(metadata.get("interlock_effect_id")),
            result_ref=_text(obj.get("id")) or None,
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

    def check_signature(self, body: bytes, headers: Mapping[str, str], secret: str) -> None:
        svix.webhooks.Webhook(secret).verify(body, dict(headers))  # parses no JSON

    def event_id_of(self, event: dict[str, Any], headers: Mapping[str, str]) -> object:
        return headers.get("svix-id")

    def observe(
        self,
        verified: Verified,
        *,
        effect_id_path: str = "",
        positive_types: Sequence[str] = (),
        negative_types: Sequence[str] = (),
    ) -> Observation:
        event = verified.event
        event_type = _text(event.get("type"))
        data = _object(event.get("data"))
        tags = data.get("tags")
        if isinstance(tags, list):  # [{"name": ..., "value": ...}] as sent, or a mapping
            tags = {
                t.get("name"): t.get("value")
                for t in tags
                if isinstance(t, dict) and isinstance(t.get("name"), str)
            }
        return Observation(
            provider=self.name,
            event_id=verified.event_id,
            event_type=event_type,
            occurred_at=_text(event.get("created_at")),
            effect_id=_effect_id(_object(tags).get("interlock_effect_id")),
            result_ref=_text(data.get("email_id")) or None,
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

    def check_signature(self, body: bytes, headers: Mapping[str, str], secret: str) -> None:
        standardwebhooks.Webhook(secret).verify(body, dict(headers), json_parse=False)

    def event_id_of(self, event: dict[str, Any], headers: Mapping[str, str]) -> object:
        return headers.get("webhook-id")

    def observe(
        self,
        verified: Verified,
        *,
        effect_id_path: str = "",
        positive_types: Sequence[str] = (),
        negative_types: Sequence[str] = (),
    ) -> Observation:
        event = verified.event
        event_type = _text(event.get("type"))
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
            occurred_at=_text(event.get("timestamp")),
            effect_id=_effect_id(_at_path(event, effect_id_path)),
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
    """The body as a JSON object (UTF-8), nested no deeper than MAX_DEPTH; else EventUnreadable."""
    try:
        event = json.loads(body.decode("utf-8"))
    except RecursionError:  # the C scanner's own guard, far past MAX_DEPTH
        raise EventUnreadable(
            f"the event nests deeper than {MAX_DEPTH} arrays and objects"
        ) from None
    except ValueError as exc:  # not UTF-8, not JSON, an integer too long to convert
        raise EventUnreadable(f"the body is not JSON: {exc}") from exc
    if not isinstance(event, dict):
        raise EventUnreadable(f"the event is a JSON {type(event).__name__}, not an object")
    try:
        check_depth(event, MAX_DEPTH)
    except CanonicalJSONError as exc:
        raise EventUnreadable(f"the event {exc}") from exc
    return event


def _event_id(value: object) -> str:
    """The provider's event id, the key a replay is known by: a string of 1 to
    MAX_EVENT_ID_LENGTH characters that PostgreSQL can store."""
    if not isinstance(value, str) or not value:
        raise EventUnreadable(f"the event id is {_kind(value)}, not a non-empty string")
    if len(value) > MAX_EVENT_ID_LENGTH:
        raise EventUnreadable(
            f"the event id is {len(value)} characters long, at most {MAX_EVENT_ID_LENGTH}"
        )
    if not _storable(value):
        raise EventUnreadable("the event id holds NUL or a lone surrogate")
    return value


def _kind(value: object) -> str:
    return "missing or null" if value is None else f"a JSON {type(value).__name__}"


def _storable(text: str) -> bool:
    """Whether PostgreSQL text and canonical JSON can hold `text` (UTF-8, no NUL)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _text(value: object, limit: int = MAX_EVIDENCE_TEXT) -> str:
    """`value` if it is text evidence can carry, else "" (absent)."""
    if isinstance(value, str) and len(value) <= limit and _storable(value):
        return value
    return ""


def _effect_id(value: object) -> str | None:
    return _text(value, MAX_EFFECT_ID_LENGTH) or None


def _unix_time(value: object) -> str:
    """A Unix time in seconds as the ledger writes times; "" for anything else."""
    if not isinstance(value, int) or isinstance(value, bool):
        return ""
    try:
        return format_timestamp(datetime.fromtimestamp(value, UTC))
    except (OverflowError, OSError, ValueError):  # out of the platform's or datetime's range
        return ""


def _stripe_timestamp(header: str) -> int:
    """The t= of a Stripe-Signature header, read as the stripe library reads it (which has
    accepted the header by then)."""
    items = [item.split("=", 2) for item in header.split(",")]
    return int(next(item[1] for item in items if item[0] == "t"))


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _at_path(event: dict[str, Any], path: str) -> Any:
    value: Any = event
    for part in path.split(".") if path else []:
        value = _object(value).get(part)
    return value
