"""An auditor's totals of receipts: how many, and how much money, per month, target, final
state and currency. The offline verifier writes it for the receipts of an export it verified
(`--summary`); the admin gives it for a tenant's effects."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from babel.numbers import get_currency_precision

from gate_client.money import proposed_money
from ledger.core.entries import Entry


class Writable(Protocol):
    """Where the CSV goes: a text file, an HTTP response."""

    def write(self, text: str, /) -> object: ...


@dataclass
class Summary:
    """An auditor's totals of the receipts verified: how many, and how much money, per month
    the effect was proposed in, target, final state and currency. The amount is the proposed
    payload's (gate_client.money), in minor units, and again in the currency's major unit; a
    payload with none counts with no amount."""

    rows: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)  # -> receipts
    amounts: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)

    def add(self, final_state: str, proposed: Entry, *, contradicted: bool = False) -> None:
        """Count one receipt; a contradicted one under `outcome_label`'s flag, never under its
        verdict alone, since the verdict is what the evidence disputes."""
        body = proposed.body_value()
        money = proposed_money(body)
        currency = money.currency if money is not None else ""
        month = proposed.created_at.strftime("%Y-%m")
        outcome = outcome_label(final_state, contradicted)
        key = (month, str(body.get("target", "")), outcome, currency)
        self.rows[key] += 1
        if money is not None:
            self.amounts[key] += money.amount_minor

    def write_csv(self, out: Writable) -> None:
        writer = csv.writer(out)
        columns = ["month", "target", "final_state", "currency", "receipts", "amount"]
        writer.writerow([*columns, "amount_in_currency"])
        for key in sorted(self.rows):
            amount = self.amounts.get(key)
            shown = "" if amount is None else str(amount)
            writer.writerow([*key, self.rows[key], shown, in_currency(amount, key[3])])


def outcome_label(final_state: str, contradicted: bool) -> str:
    """How a receipt is counted in outcome tables: by its final state, flagged when evidence
    contradicts it (a person must look), so no total counts it as settled by its verdict."""
    return f"{final_state} (contradicted)" if contradicted else final_state


def in_currency(amount_minor: int | None, currency: str) -> str:
    """Minor units as a decimal of the currency's major unit (cents to "12.50", yen to "800"),
    for a spreadsheet; blank without an amount or a currency to know the unit by."""
    if amount_minor is None or not currency:
        return ""
    return str(Decimal(amount_minor).scaleb(-get_currency_precision(currency)))
