from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary import reconciliation, selectors, services
from notary.models import Effect, ReconciliationFinding, Tenant

_COMPARED = [f.name for f in Effect._meta.fields if f.name not in ("id",)]
_FINDING_COMPARED = [f.name for f in ReconciliationFinding._meta.fields if f.name not in ("id",)]


class Command(BaseCommand):
    help = (
        "Recompute the effects table and the reconciliation findings table of a tenant (or "
        "every tenant) from its ledger alone, and say whether anything differed from the "
        "tables they replace. With --check, write nothing: name every effect and finding "
        "whose row differs from its entries and exit non-zero if any does (verify_ledger runs "
        "the same checks, see LEDGER_VERIFY_CHECKS)."
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
            effects = _rows(tenant)
            count = services.effects_rebuild(tenant=tenant)
            self.stdout.write(
                f"{tenant.slug}: {count} effects rebuilt from the ledger; "
                + _verdict(effects, _rows(tenant))
            )
            findings = _finding_rows(tenant)
            count = reconciliation.findings_rebuild(tenant=tenant)
            self.stdout.write(
                f"{tenant.slug}: {count} findings rebuilt from the ledger; "
                + _verdict(findings, _finding_rows(tenant))
            )

    def _check(self, tenants: list[Tenant]) -> None:
        failed = []
        for tenant in tenants:
            for table, differences in (
                ("effects", selectors.effect_projection_differences(tenant=tenant)),
                ("findings", selectors.finding_projection_differences(tenant=tenant)),
            ):
                for line in differences:
                    self.stdout.write(f"{tenant.slug}: {line}")
                if differences:
                    failed.append(tenant.slug)
                else:
                    self.stdout.write(f"{tenant.slug}: the {table} table is the ledger's")
        if failed:
            raise CommandError(
                f"the effects or findings table differs from the ledger for "
                f"{', '.join(dict.fromkeys(failed))}; manage.py rebuild_effects rewrites them "
                "from the entries"
            )


def _verdict(before: Mapping[Any, tuple[Any, ...]], after: Mapping[Any, tuple[Any, ...]]) -> str:
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return "no differences" if not changed else f"{len(changed)} differed: {changed[:5]}"


def _rows(tenant: Tenant) -> dict[str, tuple[Any, ...]]:
    rows = Effect.objects.filter(tenant=tenant).values_list("effect_id", *_COMPARED)
    return {row[0]: row[1:] for row in rows}


def _finding_rows(tenant: Tenant) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    rows = ReconciliationFinding.objects.filter(tenant=tenant).values_list(
        "target", "kind", "subject", *_FINDING_COMPARED
    )
    return {row[:3]: row[3:] for row in rows}
