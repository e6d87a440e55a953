from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary import services
from notary.models import Effect, Tenant

_COMPARED = [f.name for f in Effect._meta.fields if f.name not in ("id",)]


class Command(BaseCommand):
    help = (
        "Recompute the effects table of a tenant (or every tenant) from its ledger alone, and "
        "say whether anything differed from the table it replaces."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenants = Tenant.objects.order_by("slug")
        if options["tenant"]:
            tenants = tenants.filter(slug=options["tenant"])
            if not tenants.exists():
                raise CommandError(f"no tenant {options['tenant']!r}")
        for tenant in tenants:
            before = _rows(tenant)
            count = services.effects_rebuild(tenant=tenant)
            after = _rows(tenant)
            changed = sorted(
                k for k in before.keys() | after.keys() if before.get(k) != after.get(k)
            )
            verdict = "no differences" if not changed else f"{len(changed)} differed: {changed[:5]}"
            self.stdout.write(f"{tenant.slug}: {count} effects rebuilt from the ledger; {verdict}")


def _rows(tenant: Tenant) -> dict[str, tuple[Any, ...]]:
    rows = Effect.objects.filter(tenant=tenant).values_list("effect_id", *_COMPARED)
    return {row[0]: row[1:] for row in rows}
