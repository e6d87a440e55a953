"""Email through Resend's official SDK, as a gate target.

Resend dedupes POST /emails on an Idempotency-Key for 24 hours, so inside that window the target
is tier 1 with the effect id as the key. The effect id also rides as the tag
``interlock_effect_id``, which Resend echoes in its delivery webhooks: with those posted to the
notary, the gate recovers from the notary's evidence past the key window (``evidence_window``)
instead of leaving every crash after a send to a person.

The lookup is the probe the seed found: Resend checks the key before the sender's domain, so
the same key from a sender on a domain it will not send from answers without sending. 409 says
an email went out under that key; 403 says none did. It is observed behaviour, not a contract,
so it is off unless ``probe_from`` names such a sender; if Resend ever sent from it, the lookup
reports that and stops trusting it.

The SDK is configured through module globals (``resend.api_key``, ``resend.api_url``); the
target sets them when given ``api_key`` / ``api_url``. The payload is the SDK's send params."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import resend
from resend.exceptions import ResendError

from gate_client.faults import CrashPoint, crash_point
from gate_client.targets import (
    FailedDefinitively,
    Found,
    InDoubt,
    LookupOutcome,
    NotFound,
    SendOutcome,
    Sent,
    Tier,
    Unknown,
)

TAG = "interlock_effect_id"
RESEND_KEY_WINDOW = timedelta(hours=24)
# The SDK's default HTTP client gives up after 30 s: a request may be in flight that long.
_SDK_TIMEOUT = timedelta(seconds=30)
# Answers that mean another request is still at work, or Resend cannot say what it did.
_IN_DOUBT_TYPES = frozenset({"concurrent_idempotent_requests", "HttpClientError"})


@dataclass
class ResendEmail:
    name: str = "resend_email"
    tier: Tier = Tier.DEDUPES
    key_window: timedelta | None = RESEND_KEY_WINDOW
    max_inflight: timedelta = _SDK_TIMEOUT
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    probe_from: str | None = None
    api_key: str | None = None
    api_url: str | None = None
    queryable: bool = field(init=False)
    # The probe asks about the key, which Resend forgets after its window.
    lookup_needs_key: bool = field(init=False)

    def __post_init__(self) -> None:
        self.queryable = self.lookup_needs_key = self.probe_from is not None
        if self.api_key is not None:
            resend.api_key = self.api_key
        if self.api_url is not None:
            resend.api_url = self.api_url

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        try:
            email = resend.Emails.send(
                email_params(effect_id, payload),  # type: ignore[arg-type]
                options={"idempotency_key": effect_id},
            )
        except ResendError as error:
            crash_point(CrashPoint.AFTER_TARGET_ACTED)
            if _in_doubt(error):
                raise InDoubt(f"{error.code} {error.error_type}: {error.message}") from error
            return FailedDefinitively(error.error_type)
        crash_point(CrashPoint.AFTER_TARGET_ACTED)
        return Sent(email["id"])

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        """Probe the key: never a replay of the real message, which past the key window (or
        with a key Resend lost) would send it again."""
        if self.probe_from is None:
            return Unknown("no probe sender configured")
        probe = {**email_params(effect_id, payload), "from": self.probe_from}
        try:
            resend.Emails.send(probe, options={"idempotency_key": effect_id})  # type: ignore[arg-type]
        except ResendError as error:
            if error.error_type == "invalid_idempotent_request":
                return Found(f"idempotency-key:{effect_id}")
            if str(error.code) == "403" and error.error_type == "validation_error":
                return NotFound()
            return Unknown(f"{error.code} {error.error_type}: {error.message}")
        self.probe_from = None
        self.queryable = False
        return Unknown(f"the probe sender {probe['from']!r} is verified: the probe sent an email")


def email_params(effect_id: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The send params with the effect id tagged, replacing any tag of that name."""
    tags = [t for t in payload.get("tags", []) if t.get("name") != TAG]
    return {**payload, "tags": [*tags, {"name": TAG, "value": effect_id}]}


def _in_doubt(error: ResendError) -> bool:
    try:
        status = int(error.code)
    except (TypeError, ValueError):
        return True
    return status >= 500 or status == 429 or error.error_type in _IN_DOUBT_TYPES
