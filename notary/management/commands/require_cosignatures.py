from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.services import LedgerInputError, require_cosignatures
from notary.models import Tenant


class Command(BaseCommand):
    help = (
        "Publish a tenant's checkpoints (receipts, exports, /v1/checkpoints/latest) only once "
        "COUNT of the configured witnesses (LEDGER_WITNESSES) cosigned them; 0 publishes each "
        "signed checkpoint at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--count", required=True, type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.select_related("log").filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        try:
            require_cosignatures(log=tenant.log, count=options["count"])
        except LedgerInputError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"{tenant.slug}: checkpoints published with {options['count']} witness cosignatures"
        )
