from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary import services
from notary.errors import NotaryInputError
from notary.models import Role, Tenant


class Command(BaseCommand):
    help = "Issue an API key for a tenant and print its token: the only time it is shown."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, metavar="SLUG")
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument("--holder", required=True, help="the person or system using it")
        parser.add_argument("--label", default="")
        parser.add_argument(
            "--target",
            action="append",
            default=[],
            metavar="NAME",
            help="role service: a target it may attest for (repeat for more; required)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        if options["role"] == Role.SERVICE and not options["target"]:
            raise CommandError("a service key attests for named targets: give --target NAME")
        try:
            _, token = services.api_key_issue(
                tenant=tenant,
                role=options["role"],
                holder=options["holder"],
                label=options["label"],
                targets=options["target"],
            )
        except NotaryInputError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(token)
