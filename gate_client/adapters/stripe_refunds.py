"""Stripe refunds through the official SDK, as a gate target.

The effect id goes out twice: as the Idempotency-Key, so Stripe replays a resend inside its 24 h
window (tier 1), and in the refund's ``metadata.interlock_effect_id``, so the refund can be found
again by listing its payment's refunds (the lookup) and so Stripe's refund webhooks name the
effect for the notary. Against Stripe itself the target is tier 1 with a lookup. A stand-in that
ignores Idempotency-Key (localstripe) must be declared tier 2: the lookup alone keeps it at once.

The declaration follows from the tier and the client. Tier 1 has Stripe's 24 h key window and
the lookup; tier 2 has the lookup and no key window; tier 3 neither. Arguments that contradict
the tier are a TypeError, and so is a client that retries by itself (``max_network_retries``)
for a peer the tier says does not dedupe: the SDK would resend behind the gate's back.
``max_inflight`` is derived from the client: every attempt's connect and read timeouts, the
SDK's backoff between attempts, and `INFLIGHT_MARGIN` (see `client_request_bound`).

The payload is ``{"payment_intent": "pi_...", "amount": <cents>}``, with optional ``"reason"``
and ``"metadata"``."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import stripe

from gate_client.adapters.declarations import (
    FROM_TIER,
    INFLIGHT_MARGIN,
    Derived,
    key_window_for,
    requests_timeouts,
)
from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import PremisesFor
from gate_client.ids import effect_id_for
from gate_client.money import Money, MoneyDeclaration, read_money
from gate_client.proposal import Premise, PremiseResult
from gate_client.reconciliation import ProviderRecord, ReconciliationError, Window
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
DEFAULT_NAME = "stripe_refunds"  # a name the notary takes (notary.services._TARGET_NAME)
STRIPE_KEY_WINDOW = timedelta(hours=24)
# A refund's amount is `amount`, in the payment's minor units; its currency is the payment's,
# which a payload may state in `currency` for its lease to check.
REFUND_MONEY = MoneyDeclaration(amount_field="amount", currency_field="currency")
# Refunds that took money back, or will: a failed or canceled one returned nothing.
_LIVE_STATUSES = frozenset({"succeeded", "pending", "requires_action"})


class StripeRefunds:
    """The refund target. `client` is the SDK's `StripeClient`; everything the gate relies on
    is derived from it and from `tier` unless given, and checked against them when given."""

    name: str
    tier: Tier
    queryable: bool
    key_window: timedelta | None
    max_inflight: timedelta
    evidence_window: timedelta | None
    attests_before_acting: bool  # Stripe acts without attesting to the notary first
    lookup_needs_key: bool  # the lookup lists refunds by metadata: no key involved
    money: MoneyDeclaration  # REFUND_MONEY: what send() refunds is read from these fields

    def __init__(
        self,
        client: stripe.StripeClient,
        *,
        name: str = DEFAULT_NAME,
        tier: Tier = Tier.DEDUPES,
        queryable: bool | None = None,
        key_window: timedelta | Derived | None = FROM_TIER,
        max_inflight: timedelta | None = None,
        evidence_window: timedelta | None = None,
    ) -> None:
        """`queryable` and `key_window` default to what `tier` says (tier 1: queryable, Stripe's
        24 h; tier 2: queryable, none; tier 3: neither). `max_inflight` defaults to
        `client_request_bound(client)` plus `INFLIGHT_MARGIN`; give it for a client whose
        timeouts the SDK does not expose (a TypeError says so). `evidence_window`: the notary
        holds the refund webhooks."""
        self.client = client
        self.name = name
        self.tier = Tier(tier)
        self.queryable = _queryable(self.tier, queryable)
        self.key_window = key_window_for(
            self.tier, key_window, provider="Stripe", window=STRIPE_KEY_WINDOW
        )
        retries = _max_network_retries(client)
        if retries and self.tier != Tier.DEDUPES:
            raise TypeError(
                f"tier {int(self.tier)} says the peer does not dedupe on the key, but the client "
                f"retries by itself (max_network_retries={retries}): the SDK would resend behind "
                "the gate's back. Give the client max_network_retries=0"
            )
        if max_inflight is None:
            max_inflight = client_request_bound(client) + INFLIGHT_MARGIN
        elif max_inflight <= timedelta(0):
            raise ValueError("max_inflight must be positive")
        self.max_inflight = max_inflight
        self.evidence_window = evidence_window
        self.attests_before_acting = False
        self.lookup_needs_key = False
        self.money = REFUND_MONEY

    def __repr__(self) -> str:
        return (
            f"StripeRefunds(name={self.name!r}, tier={self.tier!r}, queryable={self.queryable}, "
            f"key_window={self.key_window!r}, max_inflight={self.max_inflight!r}, "
            f"evidence_window={self.evidence_window!r})"
        )

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        # The amount refunded is the one lease limits and budgets read: the declared field's.
        params: dict[str, Any] = {
            "payment_intent": payload["payment_intent"],
            "amount": read_money(payload, self.money).amount_minor,
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


def client_request_bound(client: stripe.StripeClient) -> timedelta:
    """The longest `client` holds one call: each of its 1 + ``max_network_retries`` attempts
    for its connect and its read timeout, and the SDK's backoff before each retry.

    `StripeClient` has no public accessor for either. It keeps them where its requests read
    them: the HTTP client at ``client._requestor._client`` (`stripe.RequestsClient` by default;
    requests takes its ``_timeout`` as connect and read timeout, or a (connect, read) pair),
    and ``max_network_retries`` in ``client._requestor._options`` (None is no retry:
    `HTTPClient._should_retry`). The sleep before retry n is at most
    ``max(INITIAL_DELAY, min(INITIAL_DELAY * 2 ** (n - 1), MAX_DELAY))`` of `stripe.HTTPClient`
    (`_sleep_time_seconds`; its jitter only shortens it). Any other HTTP client, or a timeout
    that bounds nothing, is a TypeError: then give the target ``max_inflight``."""
    http_client = getattr(getattr(client, "_requestor", None), "_client", None)
    if not isinstance(http_client, stripe.RequestsClient):
        raise TypeError(
            f"the Stripe client's HTTP client ({type(http_client).__name__}) has no timeout "
            "the SDK exposes, so how long a refund request may be in flight cannot be derived: "
            "give max_inflight= (at least every attempt's connect and read timeouts, plus the "
            "backoff between attempts)"
        )
    connect, read = requests_timeouts(http_client._timeout, "the Stripe client's")
    retries = _max_network_retries(client)
    if retries is None:
        raise TypeError(
            "the Stripe client keeps its max_network_retries elsewhere than this SDK did "
            "(client._requestor._options), so how long a refund request may be in flight "
            "cannot be derived: give max_inflight="
        )
    backoff = sum(
        max(
            stripe.HTTPClient.INITIAL_DELAY,
            min(stripe.HTTPClient.INITIAL_DELAY * 2 ** (n - 1), stripe.HTTPClient.MAX_DELAY),
        )
        for n in range(1, retries + 1)
    )
    return timedelta(seconds=(1 + retries) * (connect + read) + backoff)


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


def refunds_created(client: stripe.StripeClient, window: Window) -> Iterator[ProviderRecord]:
    """Every refund Stripe shows created in `window`, newest first, each with the effect id its
    metadata carries (none for a refund made outside the gate), through the SDK's auto-paging
    over ``created`` (whole seconds: the window's ends rounded outwards). A refund the key may
    not read, or an answer that is not a list, is a ReconciliationError naming the error's class,
    status and code only (never the request, which carries the key)."""
    params: dict[str, Any] = {
        "created": {
            "gte": math.floor(window.since.timestamp()),
            "lt": math.ceil(window.until.timestamp()),
        },
        "limit": 100,
    }
    try:
        for refund in client.v1.refunds.list(params=params).auto_paging_iter():  # type: ignore[arg-type]
            yield ProviderRecord(
                ref=refund.id,
                created_at=datetime.fromtimestamp(refund.created, UTC),
                effect_id=_effect_of(refund),
                evidence=_refund_evidence(refund),
                money=_refund_money(refund),
            )
    except stripe.StripeError as error:
        raise ReconciliationError(
            f"Stripe refused the refund list: {type(error).__name__} "
            f"(HTTP {error.http_status or '-'}, {error.code or 'no code'})"
        ) from error


def _refund_evidence(refund: stripe.Refund) -> dict[str, Any]:
    """What a reviewer needs of a refund, as Stripe shows it."""
    metadata = refund.metadata.to_dict() if refund.metadata else {}
    shown = {
        "id": refund.id,
        "amount": refund.amount,
        "currency": refund.currency,
        "status": refund.status,
        "created": refund.created,
        "payment_intent": getattr(refund, "payment_intent", None),
        "charge": getattr(refund, "charge", None),
        "reason": getattr(refund, "reason", None),
        "metadata": {str(k): str(v) for k, v in metadata.items()},
    }
    return {k: v for k, v in shown.items() if v is not None}


def _refund_money(refund: stripe.Refund) -> Money | None:
    """What the refund gave back, in the currency's minor unit as Stripe counts it."""
    amount = getattr(refund, "amount", None)
    if isinstance(amount, bool) or not isinstance(amount, int):
        return None
    currency = getattr(refund, "currency", None)
    return Money(amount, currency.upper() if isinstance(currency, str) else "")


def _refunds_of(client: stripe.StripeClient, payment_intent: str) -> Iterator[stripe.Refund]:
    page = client.v1.refunds.list(params={"payment_intent": payment_intent, "limit": 100})
    return iter(page.auto_paging_iter())


def _effect_of(refund: stripe.Refund) -> str | None:
    effect_id = refund.metadata.to_dict().get(METADATA_KEY) if refund.metadata else None
    return effect_id if isinstance(effect_id, str) else None


def _max_network_retries(client: stripe.StripeClient) -> int | None:
    """The client's own retries (None there: none); None if this SDK keeps them elsewhere."""
    options = getattr(getattr(client, "_requestor", None), "_options", None)
    retries = getattr(options, "max_network_retries", "missing")
    if retries is None:
        return 0
    return retries if isinstance(retries, int) else None


def _queryable(tier: Tier, queryable: bool | None) -> bool:
    if queryable is None:
        return tier != Tier.NEITHER
    if tier == Tier.LOOKUP and not queryable:
        raise TypeError("tier 2 is a target that can be looked up: it cannot be queryable=False")
    if tier == Tier.NEITHER and queryable:
        raise TypeError(
            "tier 3 is a target that can neither dedupe nor be looked up: it cannot be "
            "queryable=True (a target that can be looked up is tier 2)"
        )
    return queryable
