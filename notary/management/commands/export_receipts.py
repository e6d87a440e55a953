from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime
from tqdm import tqdm

from notary.errors import NotaryConflict
from notary.exports import export_receipts
from notary.models import Effect, Tenant


class Command(BaseCommand):
    help = (
        "Write a tenant's receipts as an interlock-receipts-export/v1 file (JSON Lines) that "
        "auditors check offline with `python -m gate_client.verify FILE --vkey VKEY`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--out", type=Path, required=True, help="file to write")
        parser.add_argument("--from", dest="since", help="proposed at or after (ISO 8601)")
        parser.add_argument("--to", dest="until", help="proposed before (ISO 8601)")
        parser.add_argument("--state", help="final state, or a prefix ending in *")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        since, until = (_moment(options[name], name) for name in ("since", "until"))
        total = Effect.objects.filter(tenant=tenant).count() + tenant.log.size
        bar = tqdm(
            total=total,
            unit=" lines",
            disable=options["no_progress"] or None,
            file=sys.stderr,
            desc="export",
        )
        written = 0
        try:
            with options["out"].open("w", encoding="utf-8") as out:
                for line in export_receipts(
                    tenant=tenant, since=since, until=until, state=options["state"]
                ):
                    out.write(line)
                    written += 1
                    bar.update(1)
        except NotaryConflict as exc:
            options["out"].unlink(missing_ok=True)
            raise CommandError(exc.detail) from exc
        finally:
            bar.close()
        self.stdout.write(f"{options['out']}: {written} lines")


def _moment(text: str | None, name: str) -> Any:
    if text is None:
        return None
    moment = parse_datetime(text)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"--{name}: an ISO 8601 time with a zone, e.g. 2026-11-01T00:00Z")
    return moment
