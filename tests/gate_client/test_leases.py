from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gate_client.authorization import DispatchRequest, Refuse, authorize
from gate_client.budgets import Spent
from gate_client.leases import Lease, LeaseState
from gate_client.money import MoneyDeclaration
from gate_client.proposal import Proposal
from gate_client.protocol import TargetDeclaration
from gate_client.targets import Tier

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LEASE = Lease(
    lease_id="lease_1",
    case_id="case_1",
    action="refund",
    expires_at=NOW + timedelta(hours=1),
    granted_by="support@shop.example",
    limits={"amount_cents": 2000},
)


PAYMENTS = TargetDeclaration(
    Tier.DEDUPES,
    True,
    timedelta(seconds=30),
    money=MoneyDeclaration("amount_cents", currency_field="currency"),
)


def refusal(state: LeaseState | None, **overrides: object) -> tuple[str, str] | None:
    """What the authorization says of a dispatch under `state`: (reason, detail), or None."""
    now = overrides.pop("now", NOW)
    arguments: dict[str, object] = {
        "effect_id": "e1",
        "attempt": 1,
        "lease_id": "lease_1",
        "case_id": "case_1",
        "action": "refund",
        "payload": {"amount_cents": 2000, "payment": "pi_1"},
        "payload_hash": "h1",
        "premises": [],
        "declaration": PAYMENTS,
    }
    arguments.update(overrides)
    decision = authorize(
        request=DispatchRequest(**arguments),  # type: ignore[arg-type]
        lease=state,
        now=now,  # type: ignore[arg-type]
        spender="",
        spent_for=lambda budget: Spent(),
        hold=lambda: None,
    )
    return (decision.reason, decision.detail) if isinstance(decision, Refuse) else None


def test_a_live_lease_in_scope_allows_the_dispatch() -> None:
    assert refusal(LeaseState(LEASE)) is None


@pytest.mark.parametrize(
    ("state", "overrides", "reason"),
    [
        (None, {}, "lease_scope"),
        (
            LeaseState(LEASE, NOW - timedelta(seconds=1), "finance@shop.example"),
            {},
            "lease_revoked",
        ),
        (LeaseState(LEASE), {"now": NOW + timedelta(hours=1)}, "lease_expired"),
        (LeaseState(LEASE), {"case_id": "case_2"}, "lease_scope"),
        (LeaseState(LEASE), {"action": "email"}, "lease_scope"),
        (LeaseState(LEASE), {"payload": {"amount_cents": 3000}}, "lease_scope"),
        (LeaseState(LEASE), {"payload": {"amount_cents": "2000"}}, "lease_scope"),
        (LeaseState(LEASE), {"payload": {}}, "lease_scope"),
    ],
    ids=[
        "unknown",
        "revoked",
        "expired",
        "other-case",
        "other-action",
        "over-limit",
        "limit-not-a-number",
        "limit-missing",
    ],
)
def test_each_way_a_lease_fails_is_named(
    state: LeaseState | None, overrides: dict[str, object], reason: str
) -> None:
    result = refusal(state, **overrides)
    assert result is not None
    assert result[0] == reason


def test_a_lease_for_an_exact_payload_refuses_any_other() -> None:
    exact = LeaseState(Lease("l2", "case_1", "refund", NOW + timedelta(hours=1), "a", {}, "h1"))
    assert refusal(exact) is None
    assert refusal(exact, payload_hash="h2") == ("lease_scope", "lease approves another payload")


def test_lease_bodies_round_trip() -> None:
    assert Lease.from_body(LEASE.body()) == LEASE


IN_DOLLARS = replace(LEASE, currency="USD")


@pytest.mark.parametrize(
    ("payload", "refused"),
    [
        ({"amount_cents": 2000, "currency": "usd"}, None),  # exactly at the limit
        ({"amount_cents": 2000, "currency": "USD"}, None),
        ({"amount_cents": 1, "currency": "usd"}, None),
        ({"amount_cents": 2001, "currency": "usd"}, "amount_cents=2001 exceeds the limit 2000"),
        (
            {"amount_cents": 0, "currency": "usd"},
            "the payload's amount 'amount_cents' is 0: a whole number of minor units from 1 to "
            "9007199254740991",
        ),
        (
            {"amount_cents": -500, "currency": "usd"},
            "the payload's amount 'amount_cents' is -500: a whole number of minor units from 1 "
            "to 9007199254740991",
        ),
        (
            {"amount_cents": 2000, "currency": "jpy"},
            "the payload is in JPY, the lease approves USD",
        ),
        ({"amount_cents": 2000}, "the payload is in no currency, the lease approves USD"),
        (
            {"amount_cents": 2000, "currency": "dollars"},
            "the payload's currency 'currency' is 'dollars': three letters of ISO 4217",
        ),
    ],
    ids=[
        "at-limit",
        "upper-case",
        "one-cent",
        "one-cent-over",
        "zero",
        "negative",
        "other-currency",
        "no-currency",
        "unreadable-currency",
    ],
)
def test_a_lease_in_a_currency_bounds_amounts_in_that_currency_only(
    payload: dict[str, object], refused: str | None
) -> None:
    result = refusal(LeaseState(IN_DOLLARS), payload=payload)
    assert result == (None if refused is None else ("lease_scope", refused))


def test_a_lease_without_a_currency_keeps_its_body_and_meaning() -> None:
    assert "currency" not in LEASE.body()  # entries granted before currencies read the same
    assert Lease.from_body(IN_DOLLARS.body()) == IN_DOLLARS
    assert refusal(LeaseState(LEASE), payload={"amount_cents": 2000, "currency": "jpy"}) is None


STANDING = replace(LEASE, case_id="", case_class="refunds-queue")
PATTERNED = replace(LEASE, case_id="", case_pattern="RF-*")


@pytest.mark.parametrize(
    ("lease", "case_id", "case_class", "covered"),
    [
        (STANDING, "case_9", "refunds-queue", True),
        (STANDING, "case_9", "vip-queue", False),
        (STANDING, "case_9", None, False),
        (STANDING, "refunds-queue", None, False),  # a case id is not a class
        (PATTERNED, "RF-1042", None, True),
        (PATTERNED, "RF-1042", "refunds-queue", True),
        (PATTERNED, "rf-1042", None, False),  # case-sensitive
        (PATTERNED, "XRF-1", None, False),
        (LEASE, "case_1", "refunds-queue", True),  # a one-case lease ignores the class
        (LEASE, "case_2", "refunds-queue", False),
    ],
)
def test_a_standing_lease_covers_its_class_or_pattern_of_cases(
    lease: Lease, case_id: str, case_class: str | None, covered: bool
) -> None:
    result = refusal(LeaseState(lease), case_id=case_id, case_class=case_class)
    assert (result is None) == covered
    if not covered:
        assert result == ("lease_scope", f"lease covers refund on {lease.cases}")


def test_standing_leases_round_trip_and_say_what_they_cover() -> None:
    assert Lease.from_body(STANDING.body()) == STANDING
    assert Lease.from_body(PATTERNED.body()) == PATTERNED
    assert "case_class" not in LEASE.body() and "case_pattern" not in LEASE.body()
    assert (STANDING.cases, PATTERNED.cases, LEASE.cases) == (
        "cases of class refunds-queue",
        "cases matching RF-*",
        "case_1",
    )


def test_a_proposals_class_is_in_its_body_but_not_its_id() -> None:
    plain = Proposal("case_9", "payments", "refund", {"amount_cents": 1}, "lease_1")
    classed = replace(plain, case_class="refunds-queue")
    assert classed.effect_id == plain.effect_id
    assert "case_class" not in plain.proposed_body([])
    assert classed.proposed_body([])["case_class"] == "refunds-queue"
