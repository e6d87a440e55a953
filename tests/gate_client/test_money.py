"""The one reading of a payload's money: by the fields its target declares, never by sniffing
field names; a payload that could be read as another amount is refused, not read."""

from __future__ import annotations

from typing import Any

import pytest

from gate_client.money import (
    Money,
    MoneyDeclaration,
    MoneyError,
    looks_like_money,
    proposed_money,
    read_money,
)

CENTS = MoneyDeclaration("amount_cents", currency_field="currency")
STRIPE = MoneyDeclaration("amount", currency_field="currency")
IN_YEN = MoneyDeclaration("amount", currency="JPY")


@pytest.mark.parametrize(
    ("payload", "declared", "money"),
    [
        ({"amount_cents": 1250, "currency": "usd"}, CENTS, Money(1250, "USD")),
        ({"amount": 800, "currency": "JPY"}, STRIPE, Money(800, "JPY")),
        ({"amount_cents": 100}, CENTS, Money(100, "")),
        ({"amount": 500, "memo": "12 items"}, IN_YEN, Money(500, "JPY")),
        ({"amount": 5, "metadata": {"amount_cents": 1}}, STRIPE, Money(5, "")),  # top level only
    ],
)
def test_a_payload_reads_by_its_declared_fields(
    payload: dict[str, Any], declared: MoneyDeclaration, money: Money
) -> None:
    assert read_money(payload, declared) == money


@pytest.mark.parametrize(
    ("payload", "declared", "named"),
    [
        # The attack: the limit read `amount`, the budget `amount_cents`.
        ({"amount": 2000, "amount_cents": 1, "currency": "USD"}, STRIPE, "'amount_cents'"),
        ({"amount_cents": 1, "amount": 2000}, CENTS, "'amount'"),
        ({"amount": 10, "refundAmount": "5000"}, STRIPE, "'refundAmount'"),
        ({"amount": 10, "total_price": 99.5}, STRIPE, "'total_price'"),
        ({"amount_cents": 5000000}, STRIPE, "'amount_cents'"),  # the declared field is absent
        ({"amount": "100"}, STRIPE, "'amount' is '100'"),
        ({"amount": True}, STRIPE, "'amount' is True"),
        ({"amount": 1.5}, STRIPE, "'amount' is 1.5"),
        ({"amount": 0}, STRIPE, "'amount' is 0"),
        ({"amount": -300}, STRIPE, "'amount' is -300"),
        ({"amount": 2**53}, STRIPE, "9007199254740991"),
        ({"amount": 100, "currency": "dollars"}, STRIPE, "'currency' is 'dollars'"),
        ({"amount": 100, "currency": 840}, STRIPE, "'currency' is 840"),
    ],
)
def test_money_that_does_not_read_one_way_is_refused_naming_why(
    payload: dict[str, Any], declared: MoneyDeclaration, named: str
) -> None:
    with pytest.raises(MoneyError, match=named.replace("(", r"\(").replace(".", r"\.")):
        read_money(payload, declared)


@pytest.mark.parametrize(
    ("name", "value", "money"),
    [
        ("amount", 1, True),
        ("AMOUNT_CENTS", "12.50", True),
        ("unit_price", 3, True),
        ("grandTotal", "1,000", True),
        ("cost", -2, True),
        ("amount", True, False),  # a flag is not an amount
        ("amount", "soon", False),
        ("amount_note", None, False),
        ("quantity", 3, False),
        ("currency", "USD", False),
    ],
)
def test_what_looks_like_money_is_a_money_word_with_a_number(
    name: str, value: Any, money: bool
) -> None:
    assert looks_like_money(name, value) is money


@pytest.mark.parametrize(
    "body",
    [
        {"amount_field": "amount", "currency_field": "amount", "currency": None, "unit": "minor"},
        {"amount_field": "amount", "currency_field": "c", "currency": "USD", "unit": "minor"},
        {"amount_field": "amount", "currency_field": None, "currency": "usd", "unit": "minor"},
        {"amount_field": "amount", "currency_field": None, "currency": None, "unit": "major"},
        {"amount_field": "a.b", "currency_field": None, "currency": None, "unit": "minor"},
        {"amount_field": "amount"},
        None,
    ],
)
def test_a_declaration_that_cannot_be_read_one_way_is_refused(body: Any) -> None:
    with pytest.raises(ValueError):
        MoneyDeclaration.from_body(body)


def test_a_proposed_body_is_read_only_by_the_declaration_it_carries() -> None:
    payload = {"amount": 2000, "currency": "usd"}
    declared = {"money": STRIPE.body()}
    assert proposed_money({"payload": payload, "declaration": declared}) == Money(2000, "USD")
    # Proposed before declarations were carried: its money is unknown, never guessed.
    assert proposed_money({"payload": payload}) is None
    assert proposed_money({"payload": payload, "declaration": {"money": None}}) is None
