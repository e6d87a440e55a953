from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary import services
from notary.errors import NotaryInputError
from notary.models import DEFAULT_REVIEW_SLA, Tenant


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _money(options: dict[str, Any]) -> dict[str, Any] | None:
    """The money declaration the options give; None without --amount-field."""
    if options["amount_field"] is None:
        if options["currency_field"] is not None or options["currency"] is not None:
            raise CommandError("--currency-field and --currency go with --amount-field")
        return None
    return {
        "amount_field": options["amount_field"],
        "currency_field": options["currency_field"],
        "currency": options["currency"],
    }


class Command(BaseCommand):
    help = (
        "Declare a tenant's target: what it allows decides what recovery may do (DESIGN §3). "
        "The gate refuses to start if its adapter declares anything else."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--name", required=True, help="as the gate's adapter names it")
        parser.add_argument("--tier", type=int, required=True, choices=[1, 2, 3])
        parser.add_argument("--queryable", action="store_true", help="it can be looked up")
        parser.add_argument(
            "--max-inflight", type=float, required=True, help="seconds a request may be in flight"
        )
        parser.add_argument("--key-window", type=float, help="seconds it dedupes on a key (tier 1)")
        parser.add_argument(
            "--evidence-window", type=float, help="seconds its webhooks may take to arrive"
        )
        parser.add_argument(
            "--attests-before-acting",
            action="store_true",
            help="its service attests each request here before acting (write-ahead)",
        )
        parser.add_argument(
            "--lookup-needs-key", action="store_true", help="its lookup asks about the key"
        )
        parser.add_argument("--lookup-url", default="", help="the notary's own lookup, tier 2")
        parser.add_argument(
            "--review-sla",
            type=float,
            default=DEFAULT_REVIEW_SLA.total_seconds(),
            help="seconds its effects may wait in the review queue before they are overdue",
        )
        parser.add_argument(
            "--amount-field", help="the payload field of the money it moves, in minor units"
        )
        parser.add_argument("--currency-field", help="the payload field of its currency")
        parser.add_argument("--currency", help="or the one currency it always moves")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        try:
            target = services.target_register(
                tenant=tenant,
                name=options["name"],
                tier=options["tier"],
                queryable=options["queryable"],
                max_inflight=timedelta(seconds=options["max_inflight"]),
                key_window=_seconds(options["key_window"]),
                evidence_window=_seconds(options["evidence_window"]),
                attests_before_acting=options["attests_before_acting"],
                lookup_needs_key=options["lookup_needs_key"],
                lookup_url=options["lookup_url"],
                review_sla=timedelta(seconds=options["review_sla"]),
                money=_money(options),
            )
        except (NotaryInputError, OverflowError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{tenant.slug}/{target.name} tier {target.tier}")
