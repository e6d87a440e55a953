"""The reconciliation rule alone: provider records against admitted effects, no notary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gate_client.money import Money
from gate_client.reconciliation import (
    CLOCK_SKEW,
    AdmittedEffect,
    FindingKind,
    ProviderRecord,
    ReconciliationError,
    Window,
    compare,
)

NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)
WINDOW = Window(NOON, NOON + timedelta(hours=1))


def record(
    ref: str, minutes: float, effect_id: str | None, money: Money | None = None
) -> ProviderRecord:
    return ProviderRecord(ref, NOON + timedelta(minutes=minutes), effect_id, {"id": ref}, money)


def effect(
    effect_id: str, state: str, ref: str = "", minutes: float = 10, money: Money | None = None
) -> AdmittedEffect:
    return AdmittedEffect(effect_id, state, ref, NOON + timedelta(minutes=minutes), money)


def kinds(findings: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(str(f.kind), f.subject) for f in findings]


def test_it_matches_a_committed_effect_by_its_result_ref() -> None:
    admitted = {"e1": effect("e1", "COMMITTED", "re_1")}
    assert compare([record("re_1", 5, "e1")], admitted, WINDOW) == []


def test_an_object_with_no_effect_or_an_unadmitted_one_is_not_admitted() -> None:
    found = compare([record("re_h", 5, None), record("re_x", 6, "never")], {}, WINDOW)
    assert kinds(found) == [("not_admitted", "re_h"), ("not_admitted", "re_x")]
    assert found[1].body(target="t", window=WINDOW)["claimed_effect_id"] == "never"
    assert "effect_id" not in found[1].body(target="t", window=WINDOW)


def test_only_objects_created_in_the_window_are_findings() -> None:
    records = [record("re_before", -1, None), record("re_end", 60, None)]
    assert compare(records, {}, WINDOW) == []


def test_a_happened_effect_not_shown_is_reported_only_when_it_settled_in_the_window() -> None:
    admitted = {
        "in": effect("in", "COMMITTED", "re_in", minutes=59),
        "out": effect("out", "COMMITTED", "re_out", minutes=-30),
    }
    assert kinds(compare([], admitted, WINDOW)) == [("not_shown", "in")]


def test_an_object_made_before_the_window_still_matches_its_effect() -> None:
    admitted = {"e1": effect("e1", "COMMITTED_BY_RETRY", "re_1", minutes=1)}
    assert compare([record("re_1", -20, "e1")], admitted, WINDOW) == []


def test_a_second_object_for_a_happened_effect_is_a_duplicate() -> None:
    admitted = {"e1": effect("e1", "COMMITTED", "re_1")}
    records = [record("re_1", 5, "e1"), record("re_2", 6, "e1")]
    assert kinds(compare(records, admitted, WINDOW)) == [("duplicate", "re_2")]


def test_a_person_decided_happened_effect_takes_its_first_object() -> None:
    admitted = {"e1": effect("e1", "RESOLVED_HAPPENED")}
    records = [record("re_1", 5, "e1"), record("re_2", 6, "e1")]
    assert kinds(compare(records, admitted, WINDOW)) == [("duplicate", "re_2")]


@pytest.mark.parametrize(
    "state", ["AMBIGUOUS", "FAILED:card_declined", "REFUSED:stale_premise", "RESOLVED_NOT_HAPPENED"]
)
def test_an_object_of_an_effect_not_committed_is_reported_with_its_state(state: str) -> None:
    [finding] = compare([record("re_1", 5, "e1")], {"e1": effect("e1", state)}, WINDOW)
    assert (finding.kind, finding.effect_id, finding.state) == (
        FindingKind.SHOWN_NOT_COMMITTED,
        "e1",
        state,
    )


def test_an_effect_in_flight_is_left_to_its_verdict() -> None:
    admitted = {"e1": AdmittedEffect("e1", "DISPATCHED", "", None)}
    assert compare([record("re_1", 5, "e1")], admitted, WINDOW) == []


def test_the_listed_window_reaches_back_by_the_lookback_and_past_the_end_by_the_skew() -> None:
    listed = WINDOW.listed(timedelta(hours=24))
    assert listed.since == NOON - timedelta(hours=24)
    assert listed.until == WINDOW.until + CLOCK_SKEW


def test_a_window_needs_aware_ordered_ends() -> None:
    with pytest.raises(ReconciliationError):
        Window(NOON, NOON)
    with pytest.raises(ReconciliationError):
        Window(NOON.replace(tzinfo=None), NOON.replace(tzinfo=None) + timedelta(1))


def test_the_effect_s_own_object_for_another_amount_is_an_amount_that_differs() -> None:
    """A lookup by metadata alone committed a refund made by hand for another sum."""
    admitted = {"e1": effect("e1", "COMMITTED_ON_QUERY", "re_1", money=Money(2500, ""))}
    [finding] = compare([record("re_1", 5, "e1", Money(1000, "USD"))], admitted, WINDOW)
    assert (finding.kind, finding.subject, finding.effect_id) == (
        FindingKind.AMOUNT_DIFFERS,
        "re_1",
        "e1",
    )
    assert finding.body(target="t", window=WINDOW)["amounts"] == {
        "admitted": {"amount_minor": 2500, "currency": ""},
        "provider": {"amount_minor": 1000, "currency": "USD"},
    }


def test_the_same_amount_matches_and_a_payload_naming_no_currency_takes_the_provider_s() -> None:
    admitted = {"e1": effect("e1", "COMMITTED", "re_1", money=Money(2500, ""))}
    assert compare([record("re_1", 5, "e1", Money(2500, "EUR"))], admitted, WINDOW) == []
    admitted = {"e1": effect("e1", "COMMITTED", "re_1", money=Money(2500, "USD"))}
    assert compare([record("re_1", 5, "e1", Money(2500, "USD"))], admitted, WINDOW) == []


def test_another_currency_for_the_same_amount_differs() -> None:
    admitted = {"e1": effect("e1", "COMMITTED", "re_1", money=Money(2000, "USD"))}
    found = compare([record("re_1", 5, "e1", Money(2000, "JPY"))], admitted, WINDOW)
    assert kinds(found) == [("amount_differs", "re_1")]


@pytest.mark.parametrize(
    ("admitted_money", "shown_money"),
    [(None, Money(1000, "USD")), (Money(1000, "USD"), None), (None, None)],
)
def test_nothing_to_compare_when_either_side_names_no_amount(
    admitted_money: Money | None, shown_money: Money | None
) -> None:
    admitted = {"e1": effect("e1", "COMMITTED", "re_1", money=admitted_money)}
    assert compare([record("re_1", 5, "e1", shown_money)], admitted, WINDOW) == []


def test_a_duplicate_for_another_amount_is_both() -> None:
    admitted = {"e1": effect("e1", "COMMITTED", "re_1", money=Money(2500, ""))}
    records = [
        record("re_1", 5, "e1", Money(2500, "USD")),
        record("re_2", 6, "e1", Money(1000, "USD")),
    ]
    assert kinds(compare(records, admitted, WINDOW)) == [
        ("amount_differs", "re_2"),
        ("duplicate", "re_2"),
    ]


def test_an_object_of_an_effect_not_committed_for_another_amount_is_both() -> None:
    admitted = {"e1": effect("e1", "AMBIGUOUS", money=Money(700, ""))}
    found = compare([record("re_1", 5, "e1", Money(900, "USD"))], admitted, WINDOW)
    assert kinds(found) == [("amount_differs", "re_1"), ("shown_not_committed", "re_1")]


def test_amounts_are_compared_only_in_the_window_and_not_for_an_effect_in_flight() -> None:
    before = {"e1": effect("e1", "COMMITTED", "re_1", minutes=1, money=Money(2500, ""))}
    assert compare([record("re_1", -20, "e1", Money(1, "USD"))], before, WINDOW) == []
    flying = {"e1": AdmittedEffect("e1", "DISPATCHED", "", None, Money(2500, ""))}
    assert compare([record("re_1", 5, "e1", Money(1, "USD"))], flying, WINDOW) == []
