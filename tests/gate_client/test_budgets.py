"""Budgets in the gate's own journal, and in the receipt: the same rules as at the notary
(gate_client.budgets), with a clock the test moves, so the window's edge is exact."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gate_client.budgets import (
    Budget,
    BudgetPer,
    Total,
    budget_problem,
    budget_problems,
    parse_budgets,
    spends_before,
)
from gate_client.gate import AmbiguousMoney, Gate
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Proposal
from gate_client.receipts import derive_receipt
from ledger.core.canonical import canonical_json
from ledger.core.entries import Entry, EntryKind, seal_entry
from testkit.world import CENTS, ServiceTarget

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
HOUR = 3600
LEASE = Lease(
    lease_id="lease_standing",
    case_id="",
    action="refund",
    expires_at=START + timedelta(days=7),
    granted_by="maria@shop.example",
    limits={"amount_cents": 5000},
    currency="USD",
    case_class="refunds-queue",
    budgets=(Budget(BudgetPer.TENANT, HOUR, max_amount=10000, max_count=3),),
)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def journal(tmp_path: Path, clock: Clock) -> LocalJournal:
    journal = LocalJournal(tmp_path / "journal", clock=clock)
    journal.grant_lease(LEASE)
    return journal


@pytest.fixture
def target() -> ServiceTarget:
    return ServiceTarget(name="payments", dedupes=False, money=CENTS)


def submit(
    journal: LocalJournal, target: ServiceTarget, clock: Clock, case_id: str, cents: object
) -> str:
    gate = Gate(journal, {"payments": target}, clock=clock)
    proposal = Proposal(
        case_id,
        "payments",
        "refund",
        {"amount_cents": cents, "currency": "USD"},
        LEASE.lease_id,
        case_class="refunds-queue",
    )
    return gate.submit(proposal).final_state


def test_refunds_fit_the_budget_to_the_cent_and_the_window_rolls(
    journal: LocalJournal, target: ServiceTarget, clock: Clock
) -> None:
    assert submit(journal, target, clock, "c1", 5000) == "COMMITTED"
    clock.now += timedelta(minutes=30)
    assert submit(journal, target, clock, "c2", 4999) == "COMMITTED"
    assert submit(journal, target, clock, "c3", 2) == "REFUSED:lease_budget"
    assert submit(journal, target, clock, "c4", 1) == "COMMITTED"  # $100.00 exactly
    assert len(target.acted) == 3
    # The window is the hour up to now: at an hour after it, the first $50.00 has left it.
    clock.now = START + timedelta(hours=1) - timedelta(microseconds=1)
    assert submit(journal, target, clock, "c5", 5000) == "REFUSED:lease_budget"
    clock.now = START + timedelta(hours=1)
    assert submit(journal, target, clock, "c6", 5000) == "COMMITTED"
    assert submit(journal, target, clock, "c7", 1) == "REFUSED:lease_budget"  # 3 refunds


def test_a_declined_refund_gives_its_amount_back(
    journal: LocalJournal, target: ServiceTarget, clock: Clock
) -> None:
    target.refuse_with = "card_declined"
    assert submit(journal, target, clock, "c1", 5000) == "FAILED:card_declined"
    target.refuse_with = None
    assert submit(journal, target, clock, "c2", 5000) == "COMMITTED"
    assert submit(journal, target, clock, "c3", 5000) == "COMMITTED"


def test_what_the_limits_refuse_spends_nothing(
    journal: LocalJournal, target: ServiceTarget, clock: Clock
) -> None:
    assert submit(journal, target, clock, "c1", 5001) == "REFUSED:lease_scope"
    assert submit(journal, target, clock, "c2", 5000) == "COMMITTED"
    assert submit(journal, target, clock, "c3", 5000) == "COMMITTED"


@pytest.mark.parametrize("cents", [-100, 0, "5000", 1.5, None])
def test_a_payload_whose_amount_is_not_one_is_refused_before_anything_is_written(
    journal: LocalJournal, target: ServiceTarget, clock: Clock, cents: object
) -> None:
    before = journal.entries()
    with pytest.raises(AmbiguousMoney, match="'amount_cents'"):
        submit(journal, target, clock, "c1", cents)
    assert journal.entries() == before and not target.acted


def test_another_currency_is_refused_before_the_budget(
    journal: LocalJournal, target: ServiceTarget, clock: Clock
) -> None:
    gate = Gate(journal, {"payments": target}, clock=clock)
    yen = Proposal(
        "c1",
        "payments",
        "refund",
        {"amount_cents": 100, "currency": "JPY"},
        LEASE.lease_id,
        case_class="refunds-queue",
    )
    assert gate.submit(yen).final_state == "REFUSED:lease_scope"
    assert not target.acted


def test_the_receipt_shows_the_budget_at_dispatch_and_the_ledger_re_derives_it(
    journal: LocalJournal, target: ServiceTarget, clock: Clock
) -> None:
    submit(journal, target, clock, "c1", 3000)
    submit(journal, target, clock, "c2", 2500)
    entries = journal.entries()
    second = next(e for e in entries if e.kind == EntryKind.DISPATCHED and e.seq > 3)
    receipt = derive_receipt(entries, second.effect_id)
    assert receipt.authorized_when_fired is True
    assert receipt.budget == {
        "spender": "",
        "amount": 2500,
        "standings": [
            {
                "per": "tenant",
                "window_seconds": HOUR,
                "max_amount": 10000,
                "max_count": 3,
                "spent_before": 3000,
                "count_before": 1,
            }
        ],
    }
    assert budget_problems(entries) == ([], 2)


def forge(entries: list[Entry], effect_id: str, budget: object) -> list[Entry]:
    """The journal with the effect's DISPATCHED body's budget replaced (re-sealed, so only the
    rules can tell)."""
    forged: list[Entry] = []
    for entry in entries:
        if entry.effect_id == effect_id and entry.kind == EntryKind.DISPATCHED:
            body = {**entry.body_value(), "budget": budget}
            if budget is None:
                del body["budget"]
            entry = replace(entry, body=canonical_json(body))
        previous = forged[-1].entry_hash if forged else entry.prev_hash
        forged.append(
            seal_entry(
                seq=entry.seq,
                kind=entry.kind,
                effect_id=entry.effect_id,
                body=entry.body,
                created_at=entry.created_at,
                prev_hash=previous,
            )
        )
    return forged


def test_a_dispatch_whose_statement_does_not_fit_was_not_authorized(
    journal: LocalJournal, target: ServiceTarget, clock: Clock
) -> None:
    submit(journal, target, clock, "c1", 3000)
    entries = journal.entries()
    effect_id = next(e.effect_id for e in entries if e.kind == EntryKind.DISPATCHED)
    honest = derive_receipt(entries, effect_id).budget
    assert honest is not None
    over = {**honest, "standings": [{**honest["standings"][0], "spent_before": 7001}]}
    understated = {**honest, "amount": 30}
    other_terms = {**honest, "standings": [{**honest["standings"][0], "max_amount": 90000}]}
    for budget in (over, understated, other_terms, None):
        receipt = derive_receipt(forge(entries, effect_id, budget), effect_id)
        assert receipt.authorized_when_fired is False, budget


@pytest.mark.parametrize(
    ("items", "currency", "problem"),
    [
        ([{"per": "tenant", "window_seconds": 60, "max_count": 1}], None, None),
        ([{"per": "tenant", "window_seconds": 60, "max_amount": 1}], None, "currency"),
        ([{"per": "tenant", "window_seconds": 60}], "USD", "bounds max_amount"),
        ([{"per": "tenant", "window_seconds": True, "max_count": 1}], "USD", "whole number"),
        ([{"per": "agent_key", "window_seconds": 366 * 86400 + 1, "max_count": 1}], "USD", "366"),
    ],
)
def test_budget_terms_are_checked(items: object, currency: str | None, problem: str | None) -> None:
    found = budget_problem(parse_budgets(items), currency=currency)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(
    "items",
    [
        {},
        [1],
        [{"per": "tenant"}],
        [{"per": "all", "window_seconds": 1}],
        [{"per": "tenant", "window_seconds": 1, "x": 1}],
    ],
)
def test_unreadable_budgets_are_refused(items: object) -> None:
    with pytest.raises(ValueError):
        parse_budgets(items)


def test_lease_bodies_with_budgets_round_trip_and_without_keep_their_old_body() -> None:
    assert Lease.from_body(LEASE.body()) == LEASE
    assert "budgets" not in replace(LEASE, budgets=()).body()


def test_the_leases_of_one_mandate_spend_from_one_pool(
    journal: LocalJournal, target: ServiceTarget, clock: Clock
) -> None:
    """Two leases, each with its own $100.00 an hour, counted apart by this journal: $50.00
    under each, two hours apart. As one mandate's, their statements are re-derived from the
    pool's spends, and the pool's total ($80.00) bounds them together, whenever spent."""
    other = replace(LEASE, lease_id="lease_other")
    journal.grant_lease(other)
    submit(journal, target, clock, "c1", 5000)
    clock.now += timedelta(hours=2)
    gate = Gate(journal, {"payments": target}, clock=clock)
    proposal = Proposal(
        "c2",
        "payments",
        "refund",
        {"amount_cents": 5000, "currency": "USD"},
        other.lease_id,
        case_class="refunds-queue",
    )
    assert gate.submit(proposal).final_state == "COMMITTED"
    entries = journal.entries()
    pools = {LEASE.lease_id: "mandate", other.lease_id: "mandate"}
    assert budget_problems(entries) == ([], 2)
    assert budget_problems(entries, pools=pools) == ([], 2)  # the windows do not meet
    problems, _ = budget_problems(entries, pools=pools, totals={"mandate": Total(8000, None)})
    assert problems == [
        f"{proposal.effect_id}: entry {entries[-2].seq} is beyond its pool: the mandate allows "
        "8000 in all; 5000 is held and this is 5000"
    ]
    assert [s.lease_id for s in spends_before(entries, lease_id=other.lease_id, seq=99)] == [
        other.lease_id
    ]
    granted = lease_entries_of_one_mandate(entries)
    assert sorted(s.lease_id for s in spends_before(granted, lease_id=other.lease_id, seq=99)) == [
        other.lease_id,
        LEASE.lease_id,
    ]


def test_a_pool_s_statements_count_every_lease_s_spends(
    journal: LocalJournal, target: ServiceTarget, clock: Clock
) -> None:
    other = replace(LEASE, lease_id="lease_other")
    journal.grant_lease(other)
    submit(journal, target, clock, "c1", 5000)
    gate = Gate(journal, {"payments": target}, clock=clock)
    gate.submit(
        Proposal(
            "c2",
            "payments",
            "refund",
            {"amount_cents": 5000, "currency": "USD"},
            other.lease_id,
            case_class="refunds-queue",
        )
    )
    problems, _ = budget_problems(
        journal.entries(), pools={LEASE.lease_id: "mandate", other.lease_id: "mandate"}
    )
    assert len(problems) == 1 and "states 0 spent in 0 effects" in problems[0]


def lease_entries_of_one_mandate(entries: list[Entry]) -> list[Entry]:
    """The journal with every LEASE_GRANTED naming one mandate, re-sealed."""
    forged: list[Entry] = []
    for entry in entries:
        if entry.kind == EntryKind.LEASE_GRANTED:
            body = {**entry.body_value(), "mandate": {"mandate_hash": "ab" * 32}}
            entry = replace(entry, body=canonical_json(body))
        forged.append(
            seal_entry(
                seq=entry.seq,
                kind=entry.kind,
                effect_id=entry.effect_id,
                body=entry.body,
                created_at=entry.created_at,
                prev_hash=forged[-1].entry_hash if forged else entry.prev_hash,
            )
        )
    return forged
