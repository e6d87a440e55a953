"""An auditor's totals of receipts: how many, and how much money, per month, target, final
state and currency. The offline verifier writes it for the receipts of an export it verified
(`--summary`); the admin gives it for a tenant's effects."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from gate_client.money import payload_money
from ledger.core.entries import Entry


class Writable(Protocol):
    """Where the CSV goes: a text file, an HTTP response."""

    def write(self, text: str, /) -> object: ...


@dataclass
class Summary:
    """An auditor's totals of the receipts verified: how many, and how much money, per month
    the effect was proposed in, target, final state and currency. The amount is the proposed
    payload's (gate_client.money), in minor units; a payload with none counts with no amount."""

    rows: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)  # -> receipts
    amounts: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)

    def add(self, final_state: str, proposed: Entry) -> None:
        body = proposed.body_value()
        money = payload_money(body.get("payload"))
        currency = money.currency if money is not None else ""
        month = proposed.created_at.strftime("%Y-%m")
        key = (month, str(body.get("target", "")), final_state, currency)
        self.rows[key] += 1
        if money is not None:
            self.amounts[key] += money.amount_minor

    def write_csv(self, out: Writable) -> None:
        writer = csv.writer(out)
        writer.writerow(["month", "target", "final_state", "currency", "receipts", "amount"])
        for key in sorted(self.rows):
            amount = str(self.amounts[key]) if key in self.amounts else ""
            writer.writerow([*key, self.rows[key], amount])
