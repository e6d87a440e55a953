"""What a proposal's payload says it moves: an amount in minor units (cents) and its currency.
One reading for the auditor's summary, the notary's review queue and everything that shows a
receipt's money, so they never disagree on what an effect was worth."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_CURRENCY = re.compile(r"[A-Za-z]{3}")
AMOUNT_FIELDS = ("amount_cents", "amount")  # the payload fields that carry it, first wins


@dataclass(frozen=True)
class Money:
    amount_minor: int  # in the currency's minor unit: cents for USD, yen for JPY
    currency: str  # ISO 4217's three letters, upper case; "" when the payload names none


def payload_money(payload: Any) -> Money | None:
    """The payload's `amount_cents` (or `amount`, as Stripe writes it) and `currency`; None
    when it names no whole-number amount. A currency that is not three letters is none."""
    if not isinstance(payload, dict):
        return None
    amount = next((payload[name] for name in AMOUNT_FIELDS if name in payload), None)
    if isinstance(amount, bool) or not isinstance(amount, int):
        return None
    currency = payload.get("currency")
    if not isinstance(currency, str) or _CURRENCY.fullmatch(currency) is None:
        return Money(amount, "")
    return Money(amount, currency.upper())
