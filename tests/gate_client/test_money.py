"""The one reading of a payload's money, shared by the summary, the projection and the desk."""

from __future__ import annotations

from typing import Any

import pytest

from gate_client.money import Money, payload_money


@pytest.mark.parametrize(
    ("payload", "money"),
    [
        ({"amount_cents": 1250, "currency": "usd"}, Money(1250, "USD")),
        ({"amount": 800, "currency": "JPY"}, Money(800, "JPY")),
        ({"amount_cents": 5, "amount": 7, "currency": "eur"}, Money(5, "EUR")),
        ({"amount_cents": -300, "currency": "usd"}, Money(-300, "USD")),
        ({"amount_cents": 100}, Money(100, "")),
        ({"amount_cents": 100, "currency": "dollars"}, Money(100, "")),
        ({"amount_cents": 100, "currency": 840}, Money(100, "")),
        ({"amount_cents": "100", "currency": "usd"}, None),
        ({"amount_cents": True, "currency": "usd"}, None),
        ({"amount_cents": 1.5, "currency": "usd"}, None),
        ({"amount_cents": None, "amount": 100}, None),  # the first field named is the amount
        ({"to": "customer@example.com"}, None),
        ("not a mapping", None),
    ],
)
def test_a_payload_reads_as_money_only_when_it_names_a_whole_amount(
    payload: Any, money: Money | None
) -> None:
    assert payload_money(payload) == money
