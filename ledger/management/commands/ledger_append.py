from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger import services
from ledger.core.entries import EntryKind


class Command(BaseCommand):
    help = "Append one entry to a log (created if missing) and print its seq."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--log", required=True, metavar="ORIGIN", help="the log's origin")
        parser.add_argument("--kind", required=True, choices=[k.value for k in EntryKind])
        parser.add_argument("--body", required=True, metavar="JSON", help="a JSON object")
        parser.add_argument("--effect-id", default="", help="the effect this entry is about")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            body = json.loads(options["body"], parse_constant=_refuse_constant)
        except ValueError as exc:
            raise CommandError(f"--body is not valid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise CommandError("--body must be a JSON object")
        try:
            log = services.ensure_log(origin=options["log"])
            entry = services.append_entry(
                log=log, kind=options["kind"], body=body, effect_id=options["effect_id"]
            )
        except services.LedgerInputError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(str(entry.seq))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
