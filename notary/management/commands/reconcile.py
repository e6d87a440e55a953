from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gate_client.reconciliation import Finding
from notary.errors import NotaryConflict, NotaryDependencyFailed, NotaryInputError
from notary.models import Target, Tenant
from notary.reconciliation import target_reconcile


def _moment(value: str, flag: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(f"{flag} {value!r}: an ISO 8601 time, e.g. 2026-12-01T09:00Z") from exc
    if moment.tzinfo is None:
        raise CommandError(f"{flag} {value!r}: give its offset (Z for UTC)")
    return moment


class Command(BaseCommand):
    help = (
        "Reconcile one target with its provider over a window (default: the last 24 h): list "
        "what the provider did, compare it with the tenant's admitted effects, record each new "
        "finding as a RECONCILED ledger entry, and print the findings and totals. A finding is "
        "evidence for a person; it changes no effect's state."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--target", required=True, help="the target's name")
        parser.add_argument("--since", help="ISO 8601 with offset; default: --until minus 24 h")
        parser.add_argument("--until", help="ISO 8601 with offset; default: now")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        target = Target.objects.filter(tenant=tenant, name=options["target"]).first()
        if target is None:
            raise CommandError(f"{tenant.slug} has no target {options['target']!r}")
        until = _moment(options["until"], "--until") if options["until"] else None
        since = _moment(options["since"], "--since") if options["since"] else None
        try:
            done = target_reconcile(tenant=tenant, target=target, since=since, until=until)
        except (NotaryInputError, NotaryConflict, NotaryDependencyFailed) as exc:
            raise CommandError(str(exc)) from exc
        new = {(f.kind, f.subject) for f in done.written}
        self.stdout.write(
            f"{tenant.slug}/{target.name} from {done.window.since.isoformat()} "
            f"to {done.window.until.isoformat()}: the provider listed {done.listed}"
        )
        if done.findings:
            self.stdout.write(_table(done.findings, new))
        totals = done.totals()
        by_kind = ", ".join(f"{n} {kind}" for kind, n in totals["by_kind"].items())
        self.stdout.write(
            f"findings: {totals['found']} ({by_kind}); written now: {totals['written']}, "
            f"recorded before: {totals['recorded_before']}"
        )


_COLUMNS = ("finding", "provider_ref", "effect_id", "state", "created", "amount", "recorded")


def _table(findings: list[Finding], new: set[tuple[str, str]]) -> str:
    rows = [_COLUMNS]
    for finding in findings:
        record = finding.record
        evidence = record.evidence if record is not None else {}
        amount = evidence.get("amount")
        rows.append(
            (
                str(finding.kind),
                record.ref if record is not None else "-",
                finding.effect_id
                or (f"({record.effect_id})" if record and record.effect_id else "-"),
                finding.state or "-",
                record.created_at.isoformat(timespec="seconds") if record is not None else "-",
                f"{amount} {evidence.get('currency', '')}".strip() if amount is not None else "-",
                "now" if (str(finding.kind), finding.subject) in new else "before",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
