from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary import selectors
from notary.models import Target, Tenant


def _seconds(window: timedelta | None) -> str:
    return "-" if window is None else f"{window.total_seconds():g} s"


class Command(BaseCommand):
    help = "A tenant's targets and what each declares, one line each."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        header = (
            "name tier queryable max_inflight key_window evidence_window attests lookup_url money"
        )
        self.stdout.write(header.replace(" ", "\t"))
        for target in selectors.targets_of(tenant=tenant):
            row = [
                target.name,
                str(target.tier),
                "yes" if target.queryable else "no",
                _seconds(target.max_inflight),
                _seconds(target.key_window),
                _seconds(target.evidence_window),
                "yes" if target.attests_before_acting else "no",
                target.lookup_url or "-",
                _money(target),
            ]
            self.stdout.write("\t".join(row))


def _money(target: Target) -> str:
    """Where its payloads hold their money: `amount/currency`, `amount USD`, or -."""
    money = target.declaration().money
    if money is None:
        return "-"
    return (
        f"{money.amount_field}/{money.currency_field}"
        if money.currency_field
        else (f"{money.amount_field} {money.currency or ''}".strip())
    )
