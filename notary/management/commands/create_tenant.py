from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary import services
from notary.errors import NotaryInputError


class Command(BaseCommand):
    help = "Create a tenant and its ledger log (origin <NOTARY_ORIGIN>/<slug>)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--slug", required=True, help="a-z, 0-9 and '-', at most 63")
        parser.add_argument("--name", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant = services.tenant_create(slug=options["slug"], name=options["name"])
        except NotaryInputError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{tenant.slug} {tenant.log.origin}")
