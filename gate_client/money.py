"""What an effect moves, read one way (DESIGN §2 rule 4): the target declares which payload field
holds the amount (in minor units: cents for USD, yen for JPY) and which holds the currency, or
the one currency it moves, and every reader (lease limits, budgets, AP2 mandate bounds, the
adapter's send, the review desk, the summary, the verifier) reads exactly those fields.

A payload whose money cannot be read that one way is ambiguous and refused before anything of
it is written (`MoneyError`): its declared amount missing or not a positive whole number, its
currency not three letters, or another field that looks like money (`looks_like_money`) beside
the declared ones, since a reader that took that field would see another amount."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledger.core.canonical import MAX_SAFE_INTEGER

_CURRENCY = re.compile(r"[A-Z]{3}")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
# A payload key whose name holds one of these (in any case) names money when its value is a
# number or a string of digits: `amount`, `amount_cents`, `refundAmount`, `total_price`.
MONEY_WORDS = ("amount", "cents", "price", "total", "cost")
_NUMERIC = re.compile(r"\s*[-+]?\d[\d,_]*(\.\d*)?\s*")
MINOR = "minor"  # the one unit amounts are declared in: the currency's minor unit


class MoneyError(ValueError):
    """A payload's money cannot be read one way: nothing of it may be written or sent."""


@dataclass(frozen=True)
class Money:
    amount_minor: int  # in the currency's minor unit: cents for USD, yen for JPY
    currency: str  # ISO 4217's three letters, upper case; "" when the payload names none


@dataclass(frozen=True)
class MoneyDeclaration:
    """Where a target's payloads hold their money: `amount_field` (a top-level key, a positive
    whole number of minor units), and the currency in `currency_field` (three letters; a
    payload without it names none) or fixed as `currency` for every payload, or neither."""

    amount_field: str
    currency_field: str | None = None
    currency: str | None = None
    unit: str = MINOR

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(problem)

    def problem(self) -> str | None:
        for label, name in (
            ("amount_field", self.amount_field),
            ("currency_field", self.currency_field),
        ):
            if name is not None and (not isinstance(name, str) or not _FIELD.fullmatch(name)):
                return f"money {label}: a payload key of 1-100 letters, digits and '_'"
        if self.currency_field == self.amount_field:
            return "money: the amount and the currency are two fields"
        if self.currency_field is not None and self.currency is not None:
            return "money: the currency is in a field or fixed, not both"
        if self.currency is not None and (
            not isinstance(self.currency, str) or not _CURRENCY.fullmatch(self.currency)
        ):
            return "money currency: three upper-case letters of ISO 4217, e.g. USD"
        if self.unit != MINOR:
            return f"money unit: {MINOR!r} (the currency's minor unit) is the one unit"
        return None

    def body(self) -> dict[str, Any]:
        return {
            "amount_field": self.amount_field,
            "currency_field": self.currency_field,
            "currency": self.currency,
            "unit": self.unit,
        }

    @classmethod
    def from_body(cls, body: object) -> MoneyDeclaration:
        """ValueError for anything but a declaration's body."""
        keys = {"amount_field", "currency_field", "currency", "unit"}
        if not isinstance(body, Mapping) or set(body) != keys:
            raise ValueError(f"money: an object with exactly {', '.join(sorted(keys))}")
        return cls(body["amount_field"], body["currency_field"], body["currency"], body["unit"])

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(f for f in (self.amount_field, self.currency_field) if f is not None)


def looks_like_money(name: str, value: Any) -> bool:
    """Whether a payload key reads as an amount to someone: its name holds one of MONEY_WORDS
    (any case) and its value is a number or a string of digits."""
    if not any(word in name.lower() for word in MONEY_WORDS):
        return False
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and _NUMERIC.fullmatch(value) is not None


def read_money(payload: Mapping[str, Any], declared: MoneyDeclaration) -> Money:
    """The payload's money as `declared` says, or MoneyError saying why it is ambiguous."""
    others = sorted(
        name
        for name, value in payload.items()
        if name not in declared.fields and looks_like_money(name, value)
    )
    if others:
        raise MoneyError(
            f"the payload's amount is {declared.amount_field!r}, and {', '.join(map(repr, others))}"
            " also looks like money: send one amount, in the declared field"
        )
    amount = payload.get(declared.amount_field)
    if (
        isinstance(amount, bool)
        or not isinstance(amount, int)
        or not 1 <= amount <= MAX_SAFE_INTEGER
    ):
        raise MoneyError(
            f"the payload's amount {declared.amount_field!r} is {amount!r}: a whole number of "
            f"minor units from 1 to {MAX_SAFE_INTEGER}"
        )
    if declared.currency is not None:
        return Money(amount, declared.currency)
    if declared.currency_field is None or declared.currency_field not in payload:
        return Money(amount, "")
    currency = payload[declared.currency_field]
    if not isinstance(currency, str) or _CURRENCY.fullmatch(currency.upper()) is None:
        raise MoneyError(
            f"the payload's currency {declared.currency_field!r} is {currency!r}: three letters"
            " of ISO 4217"
        )
    return Money(amount, currency.upper())


def proposed_money(proposed: Mapping[str, Any]) -> Money | None:
    """What a PROPOSED body moves, read by the declaration it carries; None when it carries
    none (proposed before declarations were carried: its money is not guessed), its target
    declares no money, or its payload does not read (it was never dispatched then)."""
    declaration = proposed.get("declaration")
    if not isinstance(declaration, Mapping) or declaration.get("money") is None:
        return None
    payload = proposed.get("payload")
    try:
        declared = MoneyDeclaration.from_body(declaration["money"])
        return read_money(payload, declared) if isinstance(payload, Mapping) else None
    except ValueError:
        return None
