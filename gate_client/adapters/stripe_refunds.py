"""Stripe refunds through the official SDK, as a gate target.

The effect id goes out twice: as the Idempotency-Key, so Stripe replays a resend inside its 24 h
window (tier 1), and in the refund's ``metadata.interlock_effect_id``, so the refund can be found
again by listing its payment's refunds (the lookup) and so Stripe's refund webhooks name the
effect for the notary. Against Stripe itself the target is tier 1 with a lookup. A stand-in that
ignores Idempotency-Key (localstripe) must be declared tier 2: the lookup alone keeps it at once.

The payload is ``{"payment_intent": "pi_...", "amount": <cents>}``, with optional ``"reason"``
and ``"metadata"``. Configure the client with ``max_network_retries=0`` unless the peer honours
keys: the SDK's own retries would resend behind the gate's back."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import stripe

from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import PremisesFor
from gate_client.ids import effect_id_for
from gate_client.proposal import Premise, PremiseResult
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

METADATA_KEY = "interlock_effect_id"
STRIPE_KEY_WINDOW = timedelta(hours=24)
# Refunds that took money back, or will: a failed or canceled one returned nothing.
_LIVE_STATUSES = frozenset({"succeeded", "pending", "requires_action"})
# The SDK's default request timeout; a request may be in flight that long.
_SDK_TIMEOUT = timedelta(seconds=80)


@dataclass
class StripeRefunds:
    client: stripe.StripeClient
    name: str = "stripe_refunds"
    tier: Tier = Tier.DEDUPES
    queryable: bool = True
    key_window: timedelta | None = STRIPE_KEY_WINDOW
    max_inflight: timedelta = _SDK_TIMEOUT
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    lookup_needs_key: bool = False

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        params: dict[str, Any] = {
            "payment_intent": payload["payment_intent"],
            "amount": payload["amount"],
            "metadata": {**payload.get("metadata", {}), METADATA_KEY: effect_id},
        }
        if "reason" in payload:
            params["reason"] = payload["reason"]
        try:
            refund = self.client.v1.refunds.create(
                params=params,  # type: ignore[arg-type]
                options={"idempotency_key": effect_id},
            )
        except stripe.APIConnectionError as error:
            raise InDoubt(str(error)) from error  # the request may have arrived
        except stripe.StripeError as error:
            crash_point(CrashPoint.AFTER_TARGET_ACTED)
            status = error.http_status or 0
            # 5xx: Stripe cannot say whether it acted. 409 and 429: another request under the
            # same key, or a lock, is still at work; it may be acting right now.
            if status >= 500 or status in (409, 429) or not status:
                raise InDoubt(f"HTTP {status}: {error.user_message}") from error
            return FailedDefinitively(error.code or f"http_{status}")
        crash_point(CrashPoint.AFTER_TARGET_ACTED)
        if refund.status not in _LIVE_STATUSES:
            return FailedDefinitively(f"refund_{refund.status}")
        return Sent(refund.id)

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        """Stripe has no search over refunds: list the payment's refunds and match metadata."""
        try:
            for refund in _refunds_of(self.client, payload["payment_intent"]):
                if _effect_of(refund) != effect_id:
                    continue
                if refund.status in _LIVE_STATUSES:
                    return Found(refund.id)
                # It acted, and the refund failed: neither "done" nor "never sent".
                return Unknown(f"refund {refund.id} is {refund.status}")
        except stripe.StripeError as error:
            return Unknown(f"{type(error).__name__}: {error.user_message}")
        return NotFound()


def payment_can_refund(
    client: stripe.StripeClient, *, payment_intent: str, amount: int, effect_id: str
) -> Premise:
    """An absolute premise: the payment succeeded and still has `amount` left to refund, not
    counting this effect's own refund (a resend must not be refused for the refund it repeats)."""

    def check() -> PremiseResult:
        intent = client.v1.payment_intents.retrieve(payment_intent)
        others = [
            refund
            for refund in _refunds_of(client, payment_intent)
            if refund.status in _LIVE_STATUSES and _effect_of(refund) != effect_id
        ]
        refunded = sum(refund.amount for refund in others)
        observed = {"status": intent.status, "amount": intent.amount, "refunded": refunded}
        holds = intent.status == "succeeded" and refunded + amount <= intent.amount
        return PremiseResult(holds, observed)

    return Premise("payment_can_refund", check)


def refund_premises(client: stripe.StripeClient) -> PremisesFor:
    """`Gate(premises_for=...)` for refunds, and the premises of a proposal to submit:
    ``refund_premises(client)(proposal.proposed_body([]))``."""

    def premises_for(proposed: Mapping[str, Any]) -> list[Premise]:
        payload = proposed["payload"]
        effect_id = effect_id_for(
            proposed["case_id"], proposed["target"], proposed["action"], tenant=proposed["tenant"]
        )
        return [
            payment_can_refund(
                client,
                payment_intent=payload["payment_intent"],
                amount=payload["amount"],
                effect_id=effect_id,
            )
        ]

    return premises_for


def _refunds_of(client: stripe.StripeClient, payment_intent: str) -> Iterator[stripe.Refund]:
    page = client.v1.refunds.list(params={"payment_intent": payment_intent, "limit": 100})
    return iter(page.auto_paging_iter())


def _effect_of(refund: stripe.Refund) -> str | None:
    effect_id = refund.metadata.to_dict().get(METADATA_KEY) if refund.metadata else None
    return effect_id if isinstance(effect_id, str) else None
