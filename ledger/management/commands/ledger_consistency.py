from __future__ import annotations

import base64
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger import selectors
from ledger.core.merkle import ProofError


class Command(BaseCommand):
    help = (
        "Print the RFC 6962 consistency proof that the tree of size OLD is a prefix of the tree of "
        "size NEW, one base64 hash a line (OLD >= 1)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--log", required=True, metavar="ORIGIN", help="the log's origin")
        parser.add_argument("--old", required=True, type=int, metavar="M")
        parser.add_argument("--new", required=True, type=int, metavar="N")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            log = selectors.get_log(origin=options["log"])
            proof = selectors.consistency_proof(
                log=log, old_size=options["old"], new_size=options["new"]
            )
        except (selectors.LedgerLookupError, ProofError) as exc:
            raise CommandError(str(exc)) from exc
        for node in proof:
            self.stdout.write(base64.b64encode(node).decode())
