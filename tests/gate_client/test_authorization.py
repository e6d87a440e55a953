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

import pytest
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
from ledger.core.canonical import canonical_json
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
        st.builds(lambda n: {"amount_cents": n}, st.integers(1000, 5000)),
        st.builds(lambda n: {"amount": n}, st.integers(1, 5000)),
    ),
    st.sampled_from([None, None, "USD"]),
    st.booleans(),
    budgets,
)
# Mostly payloads that read, so both answers are drawn often: some over a limit, in another
# currency, with a second amount, or with no amount.
payloads = st.builds(
    lambda cents, currency, extra: {
        "payment": "pay_1",
        **({} if cents is None else {"amount_cents": cents}),
        **({} if currency is None else {"currency": currency}),
        **extra,
    },
    st.one_of(st.integers(1, 2500), st.integers(1, 2500), st.integers(-5, 6000), st.just(None)),
    st.sampled_from(["usd", "USD", None, "JPY", "dollars"]),
    st.sampled_from([{}, {}, {}, {"note": "12 items"}, {"amount": 5}, {"total": "3"}]),
)
declarations = st.sampled_from([CENTS_DECLARATION, CENTS_DECLARATION, NO_MONEY, None])


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
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
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


def test_a_proposal_without_a_declaration_is_never_read_by_guessing_its_money(
    tmp_path: Path,
) -> None:
    declared = CENTS_DECLARATION.body()
    """Proposed before declarations were carried: under a lease with money terms its dispatch
    is refused, and one already in a ledger re-derives as not authorized; under a lease without
    money terms it goes as before."""
    clock = Clock()
    journal = LocalJournal(tmp_path / "journal", clock=clock)
    counted = Lease("lease_1", "case-0", "refund", START + timedelta(days=1), "maria")
    journal.grant_lease(counted)
    old = propose(journal, "case-0", {"payment": "pay_1", "amount_cents": 100}, None)
    assert journal.dispatch(old).kind == EntryKind.DISPATCHED
    assert derive_receipt(journal.entries(), old.effect_id).authorized_when_fired is True

    bounded = replace(counted, lease_id="lease_2", case_id="case-1", limits={"amount_cents": 5000})
    journal.grant_lease(bounded)
    proposal = Proposal("case-1", "payments", "refund", {"amount_cents": 100}, "lease_2")
    body = proposal.proposed_body([])
    journal.propose(effect_id=proposal.effect_id, body=body)
    request = DispatchRequest.of_proposal(proposal.effect_id, body, 1, [], False)
    with pytest.raises(LeaseRefused) as refused:
        journal.dispatch(request)
    assert (
        refused.value.detail == "the proposal carries no target declaration: its money is unknown"
    )
    forced = request.entry_body()
    journal.record(kind=EntryKind.DISPATCHED, effect_id=request.effect_id, body=forced)
    receipt = derive_receipt(journal.entries(), request.effect_id)
    assert receipt.authorized_when_fired is False
    # The same dispatch with the declaration its target has re-derives as authorized.
    assert (
        derive_receipt(
            [
                replace(e, body=canonical_json({**e.body_value(), "declaration": declared}))
                if e.kind == EntryKind.PROPOSED and e.effect_id == request.effect_id
                else e
                for e in journal.entries()
            ],
            request.effect_id,
        ).authorized_when_fired
        is True
    )
