"""An in-process target with its own ground truth, for the gate's unit tests.

It implements the Target protocol honestly: it acts at most once per call, dedupes on the key
only when told to, answers lookups only when queryable, and can drop its response or "crash" the
caller at a chosen moment. The process-level matrix runs the same protocol against a real server."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gate_client.authorization import DispatchRequest, Refuse, authorize
from gate_client.budgets import Spent
from gate_client.leases import LeaseState
from gate_client.money import MoneyDeclaration
from gate_client.protocol import TargetDeclaration
from gate_client.targets import (
    FailedDefinitively,
    Found,
    InDoubt,
    LookupOutcome,
    NotFound,
    SendOutcome,
    Sent,
    Tier,
)

# A payments service whose payloads hold their amount in cents and may name their currency:
# what the tests' leases with an amount_cents limit bound.
CENTS = MoneyDeclaration(amount_field="amount_cents", currency_field="currency")
CENTS_DECLARATION = TargetDeclaration(
    Tier.DEDUPES, True, timedelta(seconds=5), timedelta(hours=24), money=CENTS
)


class NoOpTarget:
    """A tier-1 target that acts every time it is asked, remembers what it sent, and finds
    what it sent. Its max in-flight time is long enough that a busy machine's slow answer is
    not a late one (protocol.late_request)."""

    name = "noop"
    tier = Tier.DEDUPES
    queryable = True
    key_window: timedelta | None = timedelta(hours=24)
    max_inflight = timedelta(seconds=30)
    evidence_window: timedelta | None = None
    attests_before_acting = False
    lookup_needs_key = False
    money: MoneyDeclaration | None = None

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        self.sent.append(effect_id)
        return Sent(f"ref_{len(self.sent)}")

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        return Found(f"ref_{effect_id}") if effect_id in self.sent else NotFound()


class SimulatedCrash(BaseException):
    """The calling process dies here: nothing after this point runs, the journal stays."""


@dataclass
class ServiceTarget:
    name: str = "service"
    tier: Tier = Tier.DEDUPES
    queryable: bool = True
    key_window: timedelta | None = timedelta(hours=24)
    max_inflight: timedelta = timedelta(seconds=5)
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    lookup_needs_key: bool = False
    money: MoneyDeclaration | None = None
    dedupes: bool = True
    # Ground truth: every time the service really acted, with the key it was sent under.
    acted: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    crash_before_acting: bool = False
    crash_after_acting: bool = False
    drop_response: bool = False
    refuse_with: str | None = None

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        if self.crash_before_acting:
            self.crash_before_acting = False
            raise SimulatedCrash("before the request left")
        if self.refuse_with is not None:
            return FailedDefinitively(self.refuse_with)
        if not (self.dedupes and self._done(effect_id)):
            self.acted.append((effect_id, dict(payload)))
        if self.crash_after_acting:
            self.crash_after_acting = False
            raise SimulatedCrash("after the service acted")
        if self.drop_response:
            self.drop_response = False
            raise InDoubt("response lost")
        return Sent(f"ref-{effect_id[-6:]}")

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        if not self.queryable:
            raise AssertionError("the gate asked a target that cannot be asked")
        return Found(f"ref-{effect_id[-6:]}") if self._done(effect_id) else NotFound()

    def times_acted(self, effect_id: str) -> int:
        return sum(1 for key, _ in self.acted if key == effect_id)

    def _done(self, effect_id: str) -> bool:
        return any(key == effect_id for key, _ in self.acted)


def dispatch_refusal(
    state: LeaseState | None,
    *,
    case_id: str,
    action: str,
    payload: Mapping[str, Any],
    now: datetime,
    payload_hash: str = "h",
    declaration: TargetDeclaration | None = CENTS_DECLARATION,
    case_class: str | None = None,
) -> tuple[str, str] | None:
    """What the one authorization says of a first dispatch under `state`, with no budget spent
    and no hold: (reason, detail), or None when it fires."""
    request = DispatchRequest(
        effect_id="eff_test",
        attempt=1,
        lease_id=state.lease.lease_id if state is not None else "",
        case_id=case_id,
        action=action,
        payload=payload,
        payload_hash=payload_hash,
        premises=[],
        case_class=case_class,
        declaration=declaration,
    )
    decision = authorize(
        request=request,
        lease=state,
        now=now,
        spender="",
        spent_for=lambda budget: Spent(),
        hold=lambda: None,
    )
    return (decision.reason, decision.detail) if isinstance(decision, Refuse) else None
