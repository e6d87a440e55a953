from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gate_client.holds import DEFAULT_HOLD_SCOPE, HoldScope
from notary import services
from notary.errors import NotaryInputError
from notary.models import DEFAULT_MAX_LEASE_AMOUNT_CENTS, DEFAULT_MAX_LEASE_DURATION

_MAX_SECONDS = 100 * 366 * 24 * 3600


class Command(BaseCommand):
    help = "Create a tenant and its ledger log (origin <NOTARY_ORIGIN>/<slug>)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--slug", required=True, help="a-z, 0-9 and '-', at most 63")
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--max-lease-amount-cents",
            type=int,
            default=DEFAULT_MAX_LEASE_AMOUNT_CENTS,
            help="the largest amount_cents limit an approver may grant on one lease",
        )
        parser.add_argument(
            "--max-lease-seconds",
            type=float,
            default=DEFAULT_MAX_LEASE_DURATION.total_seconds(),
            help="the longest a lease may run from its grant, in seconds",
        )
        parser.add_argument(
            "--hold-scope",
            choices=[scope.value for scope in HoldScope],
            default=DEFAULT_HOLD_SCOPE.value,
            help="while an effect is AMBIGUOUS or contradicted, hold the new effects of its case "
            "on the same target (case_target, the default), on any target (case), or none (off)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        seconds = options["max_lease_seconds"]
        if not math.isfinite(seconds) or not 0 < seconds <= _MAX_SECONDS:
            raise CommandError("--max-lease-seconds: a positive number of seconds, at most 100 y")
        try:
            tenant = services.tenant_create(
                slug=options["slug"],
                name=options["name"],
                max_lease_amount_cents=options["max_lease_amount_cents"],
                max_lease_duration=timedelta(seconds=seconds),
                hold_scope=options["hold_scope"],
            )
        except NotaryInputError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{tenant.slug} {tenant.log.origin}")
