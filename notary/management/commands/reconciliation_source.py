from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notary.errors import NotaryInputError
from notary.models import ReconciliationProvider, Target, Tenant
from notary.reconciliation import reconciliation_source_set


class Command(BaseCommand):
    help = (
        "Say where a target's provider is listed for reconciliation, and the key to read it "
        "with. The key is read from a file or from standard input, never from the command line "
        "(which other users and the shell's history see), and is stored server-side only: "
        "give a read-only key (a Stripe restricted key that reads refunds)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--target", required=True, help="the target's name")
        parser.add_argument("--provider", required=True, choices=ReconciliationProvider.values)
        parser.add_argument("--base-url", default="", help="default: the provider's own API")
        key = parser.add_mutually_exclusive_group()
        key.add_argument("--api-key-file", type=Path, help="a file holding the key")
        key.add_argument("--api-key-stdin", action="store_true", help="read the key from stdin")
        parser.add_argument(
            "--lookback",
            type=float,
            help="seconds before a window its provider is listed (default: the target's key "
            "window, else its max in-flight time)",
        )
        parser.add_argument("--disable", action="store_true", help="the beat skips it")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        target = Target.objects.filter(tenant=tenant, name=options["target"]).first()
        if target is None:
            raise CommandError(f"{tenant.slug} has no target {options['target']!r}")
        api_key: str | None = None
        if options["api_key_file"] is not None:
            try:
                api_key = options["api_key_file"].read_text().strip()
            except OSError as exc:
                raise CommandError(f"cannot read {options['api_key_file']}: {exc}") from exc
        elif options["api_key_stdin"]:
            api_key = sys.stdin.readline().strip()
        lookback = options["lookback"]
        try:
            source = reconciliation_source_set(
                target=target,
                provider=options["provider"],
                base_url=options["base_url"],
                api_key=api_key,
                lookback=timedelta(seconds=lookback) if lookback is not None else None,
                enabled=not options["disable"],
            )
        except (NotaryInputError, OverflowError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"{tenant.slug}/{target.name}: reconciled with {source.provider} at "
            f"{source.base_url or 'its own API'}, key {'set' if source.api_key else 'not set'}, "
            f"lookback {source.lookback.total_seconds():g} s"
            + ("" if source.enabled else ", disabled")
        )
