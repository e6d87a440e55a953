"""Whether a dispatch is authorized, decided by one function of the protocol (DESIGN §2 rule 4):
`authorize`. The local journal and the notary call it at the instant of dispatch, atomically
with recording DISPATCHED; the receipt and the offline verifier call it again on the entries
before that DISPATCHED, and the dispatch was authorized exactly when it answers the body that
was recorded. Nothing else decides it.

In: the lease as the ledger left it, the dispatch request (with the target's declaration its
PROPOSED carries), the instant, the spender and what it spent so far (budgets), and the hold
on it (gate_client.holds). Out: `Fire(body)` (the DISPATCHED body, with its budget statement
on a first dispatch under a budgeted lease), `Refuse(reason, detail)` or `Held(hold)`.

First the hold: a hold is not a verdict and a refusal is, so an effect that waits for a person
(its own evidence says it was done before it was dispatched, or another effect of its case
waits) is held, never refused by a lease that lapsed meanwhile: "not done" could contradict
what the person finds. Then the lease's terms, in order: revoked, expired, the case and action
it covers; the exact payload it approves; then money, read only as the target declares it
(gate_client.money): a money target's payload must read one way, a lease with money terms (a
limit, a currency, an amount budget) needs a target that declares money, its limits name only
the declared amount field, and a standing lease on a money target bounds each effect's amount;
then the budgets, spending the declared amount (a target without money spends only a count)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gate_client.budgets import SpentFor, budget_statement
from gate_client.holds import Hold
from gate_client.leases import Lease, LeaseState
from gate_client.money import Money, MoneyError, read_money
from gate_client.protocol import TargetDeclaration, proposed_declaration
from ledger.core.entries import format_timestamp


@dataclass(frozen=True)
class DispatchRequest:
    """Attempt `attempt` of an effect: what the lease must cover, and the premises as observed
    just before. `declaration` is the target's, as its PROPOSED carries it (None: proposed
    before declarations were carried, so its money cannot be read)."""

    effect_id: str
    attempt: int
    lease_id: str
    case_id: str
    action: str
    payload: Mapping[str, Any]
    payload_hash: str
    premises: Sequence[Mapping[str, Any]]
    recovery: bool = False
    case_class: str | None = None  # the class the proposal names for its case
    declaration: TargetDeclaration | None = None

    @classmethod
    def of_proposal(
        cls,
        effect_id: str,
        proposed: Mapping[str, Any],
        attempt: int,
        premises: Sequence[Mapping[str, Any]],
        recovery: bool,
    ) -> DispatchRequest:
        """Attempt `attempt` of the effect whose PROPOSED body is `proposed`."""
        return cls(
            effect_id=effect_id,
            attempt=attempt,
            lease_id=proposed["lease_id"],
            case_id=proposed["case_id"],
            action=proposed["action"],
            payload=proposed["payload"],
            payload_hash=proposed["payload_hash"],
            premises=premises,
            recovery=recovery,
            case_class=proposed.get("case_class"),
            declaration=proposed_declaration(proposed),
        )

    def entry_body(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "lease_id": self.lease_id,
            "premises": [dict(p) for p in self.premises],
            "recovery": self.recovery,
        }


@dataclass(frozen=True)
class Fire:
    """Authorized: record DISPATCHED with this body, then send."""

    body: Mapping[str, Any]


@dataclass(frozen=True)
class Refuse:
    reason: str  # one of protocol.REFUSAL_REASONS
    detail: str


@dataclass(frozen=True)
class Held:
    """Not dispatched: it, or another effect of its case, waits for a person."""

    hold: Hold


Decision = Fire | Refuse | Held


def authorize(
    *,
    request: DispatchRequest,
    lease: LeaseState | None,
    now: datetime,
    spender: str,
    spent_for: SpentFor,
    hold: Callable[[], Hold | None],
) -> Decision:
    """The one answer to "may this dispatch fire now?" (see the module's docstring).
    `spent_for` is asked only for a first dispatch under a budgeted lease (it may cost a
    read)."""
    held = hold()
    if held is not None:
        return Held(held)
    refused = _lease_refusal(request, lease, now)
    if refused is not None:
        return refused
    assert lease is not None  # no lease is refused above
    body = request.entry_body()
    budgets = lease.lease.budgets
    if request.attempt != 1 or not budgets:
        return Fire(body)  # a resend is the same effect: it spent at its first dispatch
    money = money_of(request.payload, request.declaration)
    amount = money.amount_minor if isinstance(money, Money) else 0
    statement = budget_statement(budgets, spender=spender, amount=amount, spent_for=spent_for)
    over = statement.refusal()
    if over is not None:
        return Refuse("lease_budget", over)
    return Fire({**body, "budget": statement.body()})


def money_of(
    payload: Mapping[str, Any], declaration: TargetDeclaration | None
) -> Money | MoneyError | None:
    """What the payload moves by the target's declaration: Money; None when the target declares
    no money; MoneyError when it does and the payload does not read one way, or when no
    declaration is known (an old PROPOSED: its money is never guessed)."""
    if declaration is None:
        return MoneyError("the proposal carries no target declaration: its money is unknown")
    if declaration.money is None:
        return None
    try:
        return read_money(payload, declaration.money)
    except MoneyError as error:
        return error


def proposal_refusal(payload: Mapping[str, Any], declaration: TargetDeclaration) -> str | None:
    """Why a proposal to a target declared so may not be written at all (None: it may): a
    money target's payload whose money does not read one way."""
    money = money_of(payload, declaration)
    return str(money) if isinstance(money, MoneyError) else None


def terms_mismatch(lease: Lease, declaration: TargetDeclaration) -> str | None:
    """Why the lease's money terms cannot apply to a target declared so (None: they can): it
    bounds money and the target moves none, or it limits another field than the one the
    target's amount is in. No dispatch to that target could ever be authorized under it, so
    the notary refuses such a proposal before writing it."""
    if declaration.money is None:
        return (
            "the lease bounds money, and the target declares none" if _money_terms(lease) else None
        )
    field = declaration.money.amount_field
    other = next((name for name in lease.limits if name != field), None)
    if other is not None:
        return f"the lease limits {other!r}; the target's amount is {field!r}"
    return None


def _lease_refusal(
    request: DispatchRequest, state: LeaseState | None, now: datetime
) -> Refuse | None:
    if state is None:
        return Refuse("lease_scope", "no such lease")
    lease = state.lease
    if state.revoked_at is not None:
        return Refuse("lease_revoked", f"revoked by {state.revoked_by}")
    if now >= lease.expires_at:
        return Refuse("lease_expired", f"expired at {format_timestamp(lease.expires_at)}")
    if not lease.covers_case(request.case_id, request.case_class) or lease.action != request.action:
        return Refuse("lease_scope", f"lease covers {lease.action} on {lease.cases}")
    if lease.payload_hash is not None and lease.payload_hash != request.payload_hash:
        return Refuse("lease_scope", "lease approves another payload")
    detail = _money_refusal(lease, request)
    return Refuse("lease_scope", detail) if detail is not None else None


def _money_refusal(lease: Lease, request: DispatchRequest) -> str | None:
    """What the lease's money terms say of the payload's money, read as declared."""
    money = money_of(request.payload, request.declaration)
    if isinstance(money, MoneyError):
        return str(money) if _money_terms(lease) or request.declaration is not None else None
    assert request.declaration is not None  # no declaration is a MoneyError above
    mismatch = terms_mismatch(lease, request.declaration)
    if mismatch is not None or money is None:
        return mismatch
    assert request.declaration.money is not None  # money was read by it
    field = request.declaration.money.amount_field
    for name, maximum in lease.limits.items():
        if money.amount_minor > maximum:
            return f"{name}={money.amount_minor} exceeds the limit {maximum}"
    if lease.standing and field not in lease.limits and lease.payload_hash is None:
        return f"a standing lease bounds each effect's amount: it has no {field!r} limit"
    if lease.currency is not None and money.currency != lease.currency:
        named = money.currency or "no currency"
        return f"the payload is in {named}, the lease approves {lease.currency}"
    return None


def _money_terms(lease: Lease) -> bool:
    """Whether the lease bounds money: a limit, a currency or an amount budget."""
    return bool(lease.limits) or lease.currency is not None or lease.bounds_amount
