"""What the review desk shows, as a finance reviewer reads it: money as "$12,500.00" and
"¥1,250", never `amount_cents 1250000` (symbols, grouping and each currency's minor unit are
Babel's, from CLDR), and ledger bodies as indented JSON, never Python reprs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from babel.numbers import format_currency, format_decimal, get_currency_precision
from django import template
from django.conf import settings
from django.utils.translation import to_locale

from gate_client.budgets import Budget, BudgetPer, BudgetStatement
from gate_client.money import MoneyError, read_money
from gate_client.protocol import proposed_declaration

register = template.Library()


def _locale() -> str:
    return to_locale(settings.LANGUAGE_CODE)


@register.filter
def money(amount_minor: int | None, currency: str = "") -> str:
    """`amount_minor` in `currency`'s minor unit as money; with no currency, the bare number
    said to be in minor units, since its worth cannot be known."""
    if amount_minor is None:
        return "-"
    if not currency:
        return f"{format_decimal(amount_minor, locale=_locale())} (minor units, no currency)"
    major = Decimal(amount_minor).scaleb(-get_currency_precision(currency))
    return str(format_currency(major, currency, locale=_locale()))


@register.filter
def limits(bounds: Mapping[str, int] | None, currency: str = "") -> str:
    """A lease's limits in words: each bounds the amount its target declares, shown as money in
    `currency` (the effect's), or in minor units of whatever currency the payload names when
    none is given."""
    if not bounds:
        return "no limits"
    words = []
    for _, maximum in sorted(bounds.items()):
        worth = (
            money(maximum, currency)
            if currency
            else f"{format_decimal(maximum, locale=_locale())} in the payload's minor units"
        )
        words.append(f"amount at most {worth}")
    return "; ".join(words)


@register.filter
def as_json(value: Any) -> str:
    """A ledger body or an observation as the JSON it was written as, indented to be read."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def payload_rows(proposed: Any, currency: str) -> list[tuple[str, str]]:
    """The PROPOSED payload's fields as (name, shown): the amount its target declares as money
    beside the raw number, text as it is, anything structured as JSON."""
    payload = proposed.get("payload") if isinstance(proposed, Mapping) else None
    if not isinstance(payload, Mapping):
        return [("payload", as_json(payload))]
    amount_field = _amount_field(proposed, payload)
    rows = []
    for name, value in payload.items():
        if name == amount_field:
            rows.append((name, f"{money(value, currency)} ({name} {value})"))
        else:
            rows.append((name, value if isinstance(value, str) else as_json(value)))
    return rows


def _amount_field(proposed: Mapping[str, Any], payload: Mapping[str, Any]) -> str | None:
    """The payload's amount field, by the declaration the PROPOSED carries, if it reads."""
    try:
        declared = proposed_declaration(proposed)
        if declared is None or declared.money is None:
            return None
        read_money(payload, declared.money)
    except (MoneyError, ValueError):
        return None
    return declared.money.amount_field


_PER = {
    BudgetPer.TENANT: "for all agent keys together",
    BudgetPer.AGENT_KEY: "for each agent key",
}


def _within(budget: Budget, currency: str) -> str:
    """What a budget allows, per how long: "$2,000.00 and 100 effects in any 1 day"."""
    bounds = []
    if budget.max_amount is not None:
        bounds.append(money(budget.max_amount, currency))
    if budget.max_count is not None:
        bounds.append(f"{format_decimal(budget.max_count, locale=_locale())} effects")
    return f"{' and '.join(bounds)} in any {_span(budget.window_seconds)}"


def _span(seconds: int) -> str:
    """A window exactly, in the largest unit it is a whole number of: "1 day", "90 seconds"
    (a rounded "2 minutes" would misstate a budget)."""
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}" if count == 1 else f"{count:,} {unit}s"
    return f"{seconds:,} seconds"


@register.filter
def budgets(terms: Any, currency: str = "") -> str:
    """A lease's budgets (Budget bodies) in words, in the lease's currency."""
    if not terms:
        return "no budget"
    return "; ".join(
        f"at most {_within(b, currency)}, {_PER[b.per]}" for b in map(Budget.from_body, terms)
    )


@register.filter
def budget_statement(statement: Any, currency: str = "") -> str:
    """A DISPATCHED's budget statement in words: what each budget had spent before it, what it
    spent, and the limits: "$1,950.00 in 41 effects of $2,000.00 and 100 effects in any 1 day
    were spent before it, for all agent keys together; it spent $50.00"."""
    if not statement:
        return "no budget"
    parsed = BudgetStatement.from_body(statement)
    said = [
        f"{money(s.spent_before.amount, currency)} in {s.spent_before.count} effects of "
        f"{_within(s.budget, currency)} were spent before it, {_PER[s.budget.per]}"
        for s in parsed.standings
    ]
    return "; ".join(said) + f"; it spent {money(parsed.amount, currency)}"
