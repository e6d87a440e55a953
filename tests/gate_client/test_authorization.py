"""The one authorization function: on drawn leases, target declarations, payloads and budget
histories, its answer at dispatch is exactly what the receipt and the auditor's verifier
re-derive from the ledger afterwards. A dispatch it refused, recorded anyway by a journal that
skipped it, never re-derives as authorized."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate_client.authorization import DispatchRequest, money_of
from gate_client.budgets import (
    Budget,
    BudgetPer,
    budget_problems,
    budget_statement,
    spends_before,
    spent_in,
)
from gate_client.journal import LeaseRefused, LocalJournal
from gate_client.leases import Lease, lease_states
from gate_client.money import Money
from gate_client.proposal import Proposal
from gate_client.receipts import derive_receipt
from ledger.core.entries import EntryKind
from testkit.world import CENTS_DECLARATION

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NO_MONEY = replace(CENTS_DECLARATION, money=None)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


budgets = st.one_of(
    st.just(()),
    st.builds(
        lambda amount, count: (Budget(BudgetPer.TENANT, 3600, amount, count),),
        st.one_of(st.none(), st.integers(1, 6000)),
        st.one_of(st.none(), st.integers(1, 3)),
    ).filter(lambda b: b[0].max_amount is not None or b[0].max_count is not None),
)
leases = st.builds(
    lambda limits, currency, standing, rolling: Lease(
        "lease_1",
        "" if standing else "case-0",
        "refund",
        START + timedelta(days=1),
        "maria",
        limits=limits,
        currency=currency,
        case_class="queue" if standing else None,
        budgets=rolling,
    ),
    st.one_of(
        st.just({}),
        st.builds(lambda n: {"amount_cents": n}, st.integers(1, 5000)),
        st.builds(lambda n: {"amount": n}, st.integers(1, 5000)),
    ),
    st.sampled_from([None, "USD"]),
    st.booleans(),
    budgets,
)
payloads = st.fixed_dictionaries(
    {"payment": st.just("pay_1")},
    optional={
        "amount_cents": st.one_of(st.integers(-5, 6000), st.just("100")),
        "currency": st.sampled_from(["usd", "JPY", "dollars"]),
        "amount": st.integers(1, 100),
        "note": st.just("12 items"),
    },
)
declarations = st.sampled_from([CENTS_DECLARATION, NO_MONEY, None])


def propose(
    journal: LocalJournal, case_id: str, payload: dict[str, Any], declaration: Any
) -> DispatchRequest:
    """Write the PROPOSED as a journal that skipped the gate's own check would (so an
    ambiguous payload reaches the dispatch); the request of its first dispatch."""
    proposal = Proposal(case_id, "payments", "refund", payload, "lease_1", case_class="queue")
    body = proposal.proposed_body([], declaration)
    journal.propose(effect_id=proposal.effect_id, body=body)
    return DispatchRequest.of_proposal(proposal.effect_id, body, 1, [], False)


def forced_body(journal: LocalJournal, request: DispatchRequest, now: datetime) -> dict[str, Any]:
    """The DISPATCHED body a journal that skipped the check writes: the budget spent honestly."""
    entries = journal.entries()
    lease = lease_states(entries)["lease_1"].lease
    body = request.entry_body()
    if not lease.budgets:
        return body
    money = money_of(request.payload, request.declaration)
    spends = spends_before(entries, lease_id="lease_1", seq=len(entries))
    statement = budget_statement(
        lease.budgets,
        spender="",
        amount=money.amount_minor if isinstance(money, Money) else 0,
        spent_for=lambda budget: spent_in(spends, budget, now=now, spender=""),
    )
    return {**body, "budget": statement.body()}


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lease=leases,
    declaration=declarations,
    earlier=st.lists(st.tuples(payloads, st.integers(0, 5400), st.booleans()), max_size=3),
    payload=payloads,
)
def test_the_authorization_at_dispatch_is_what_the_ledger_re_derives(
    lease: Lease,
    declaration: Any,
    earlier: list[tuple[dict[str, Any], int, bool]],
    payload: dict[str, Any],
) -> None:
    clock = Clock()
    with tempfile.TemporaryDirectory() as directory:
        journal = LocalJournal(Path(directory) / "journal", clock=clock)
        journal.grant_lease(lease)
        for n, (spent, seconds, failed) in enumerate(earlier):
            clock.now = START + timedelta(seconds=seconds)
            request = propose(journal, f"case-{n + 1}", spent, declaration)
            try:
                journal.dispatch(request)
            except LeaseRefused:
                continue
            if failed:  # known not to have happened: its spend comes back
                journal.record(
                    kind=EntryKind.FAILED,
                    effect_id=request.effect_id,
                    body={"attempt": 1, "code": "card_declined"},
                )
        clock.now = START + timedelta(seconds=5401)
        request = propose(journal, "case-0", payload, declaration)
        try:
            journal.dispatch(request)
            authorized = True
        except LeaseRefused:
            authorized = False
            body = forced_body(journal, request, clock.now)
            journal.record(kind=EntryKind.DISPATCHED, effect_id=request.effect_id, body=body)
        entries = journal.entries()
        receipt = derive_receipt(entries, request.effect_id)
        assert receipt.authorized_when_fired is authorized
        problems, _ = budget_problems(entries)
        assert problems == []
        journal.close()
