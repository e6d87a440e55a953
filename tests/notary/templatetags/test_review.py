"""Money and ledger bodies as the review desk shows them."""

from __future__ import annotations

import pytest

from notary.templatetags.review import as_json, limits, money, payload_rows
from testkit.world import CENTS_DECLARATION


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (1_250_000, "USD", "$12,500.00"),
        (1250, "JPY", "¥1,250"),
        (5, "EUR", "€0.05"),
        (-500, "USD", "-$5.00"),
        (1250, "BHD", "BHD1.250"),  # three minor digits
        (1_250_000, "", "1,250,000 (minor units, no currency)"),
        (None, "USD", "-"),
    ],
)
def test_money_is_shown_in_its_currency_and_minor_unit(
    amount: int | None, currency: str, shown: str
) -> None:
    assert money(amount, currency) == shown


def test_lease_limits_read_as_words_and_money() -> None:
    assert limits({"amount_cents": 1_250_000}, "USD") == "amount at most $12,500.00"
    assert limits({"amount_cents": 1_250_000}) == (
        "amount at most 1,250,000 in the payload's minor units"
    )
    assert limits({"amount": 500}, "JPY") == "amount at most ¥500"
    assert limits({}) == "no limits"


def test_a_payload_shows_its_amount_as_money_and_structure_as_json() -> None:
    payload = {"amount_cents": 1250, "to": "a@b", "items": [1, 2]}
    proposed = {"payload": payload, "declaration": CENTS_DECLARATION.body()}
    rows = payload_rows(proposed, "USD")
    assert rows == [
        ("amount_cents", "$12.50 (amount_cents 1250)"),
        ("to", "a@b"),
        ("items", "[\n  1,\n  2\n]"),
    ]
    # Proposed without a declaration: its money is not guessed from a field's name.
    assert payload_rows({"payload": payload}, "USD")[0] == ("amount_cents", "1250")
    assert as_json({"b": 1, "a": "ü"}) == '{\n  "a": "ü",\n  "b": 1\n}'
