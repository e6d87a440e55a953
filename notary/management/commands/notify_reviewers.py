from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary import selectors, services
from notary.errors import NotaryInputError
from notary.groups import FINANCE_REVIEWERS
from notary.models import Tenant


class Command(BaseCommand):
    help = (
        "Set who is told when a tenant's effect enters the review queue, passes its review SLA "
        "or has a decision contradicted: email addresses (none: the active members of "
        f"{FINANCE_REVIEWERS!r} with an address) and a webhook for a chat tool, signed as "
        "Standard Webhooks sign. Options left out keep what is set. A --webhook-url gets a new "
        "signing secret, printed this once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, metavar="SLUG")
        emails = parser.add_mutually_exclusive_group()
        emails.add_argument(
            "--email",
            action="extend",
            nargs="+",
            metavar="ADDR",
            help="the addresses to email, replacing those set (repeat or list several)",
        )
        emails.add_argument(
            "--no-email",
            action="store_true",
            help=f"no addresses: email the members of {FINANCE_REVIEWERS!r}",
        )
        hook = parser.add_mutually_exclusive_group()
        hook.add_argument("--webhook-url", metavar="URL", help="POST each notice here, signed")
        hook.add_argument("--no-webhook", action="store_true", help="send no webhook")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        emails = [] if options["no_email"] else options["email"]
        webhook_url = "" if options["no_webhook"] else options["webhook_url"]
        try:
            config, secret = services.review_notifications_set(
                tenant=tenant, emails=emails, webhook_url=webhook_url
            )
        except NotaryInputError as exc:
            raise CommandError(str(exc)) from exc
        recipients = ", ".join(selectors.review_recipients(tenant=tenant)) or "nobody"
        whose = "" if config.emails else f" (the members of {FINANCE_REVIEWERS!r})"
        self.stdout.write(f"{tenant.slug}: review notices emailed to {recipients}{whose}")
        self.stdout.write(f"webhook: {config.webhook_url or 'none'}")
        if secret:
            self.stdout.write(f"The webhook's signing secret, shown this once: {secret}")
