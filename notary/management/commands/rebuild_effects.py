from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary import selectors, services
from notary.models import Effect, Tenant

_COMPARED = [f.name for f in Effect._meta.fields if f.name not in ("id",)]


class Command(BaseCommand):
    help = (
        "Recompute the effects table of a tenant (or every tenant) from its ledger alone, and "
        "say whether anything differed from the table it replaces. With --check, write "
        "nothing: name every effect whose row differs from its entries and exit non-zero if "
        "any does (verify_ledger runs the same check, see LEDGER_VERIFY_CHECKS)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")
        parser.add_argument(
            "--check", action="store_true", help="compare only, write nothing; fail on a difference"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenants = Tenant.objects.order_by("slug")
        if options["tenant"]:
            tenants = tenants.filter(slug=options["tenant"])
            if not tenants.exists():
                raise CommandError(f"no tenant {options['tenant']!r}")
        if options["check"]:
            self._check(list(tenants))
            return
        for tenant in tenants:
            before = _rows(tenant)
            count = services.effects_rebuild(tenant=tenant)
            after = _rows(tenant)
            changed = sorted(
                k for k in before.keys() | after.keys() if before.get(k) != after.get(k)
            )
            verdict = "no differences" if not changed else f"{len(changed)} differed: {changed[:5]}"
            self.stdout.write(f"{tenant.slug}: {count} effects rebuilt from the ledger; {verdict}")

    def _check(self, tenants: list[Tenant]) -> None:
        failed = []
        for tenant in tenants:
            differences = selectors.effect_projection_differences(tenant=tenant)
            for line in differences:
                self.stdout.write(f"{tenant.slug}: {line}")
            if differences:
                failed.append(tenant.slug)
            else:
                self.stdout.write(f"{tenant.slug}: the effects table is the ledger's")
        if failed:
            raise CommandError(
                f"the effects table differs from the ledger for {', '.join(failed)}; "
                "manage.py rebuild_effects rewrites it from the entries"
            )


def _rows(tenant: Tenant) -> dict[str, tuple[Any, ...]]:
    rows = Effect.objects.filter(tenant=tenant).values_list("effect_id", *_COMPARED)
    return {row[0]: row[1:] for row in rows}
