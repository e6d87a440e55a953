from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary.models import Target, Tenant
from webhooks import services
from webhooks.models import Provider


class Command(BaseCommand):
    help = (
        "Create the URL a provider posts a target's webhooks to; prints its path. Give --secret "
        "twice while a secret is rotated."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--target", required=True, help="the target the events report on")
        parser.add_argument("--provider", required=True, choices=Provider.values)
        parser.add_argument("--secret", action="append", required=True, help="whsec_...")
        parser.add_argument("--effect-id-path", default="", help="standard: e.g. data.ref")
        parser.add_argument("--positive", action="append", default=[], help="standard: type")
        parser.add_argument("--negative", action="append", default=[], help="standard: type")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        target = Target.objects.filter(tenant=tenant, name=options["target"]).first()
        if target is None:
            raise CommandError(f"tenant {tenant.slug} has no target {options['target']!r}")
        try:
            endpoint = services.endpoint_create(
                tenant=tenant,
                target=target,
                provider=options["provider"],
                secrets=options["secret"],
                effect_id_path=options["effect_id_path"],
                positive_types=options["positive"],
                negative_types=options["negative"],
            )
        except services.WebhookInputError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"/webhooks/{endpoint.public_id}/")
