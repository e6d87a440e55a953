from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger import selectors, services
from ledger.keys import SigningKeyError, load_signing_key


class Command(BaseCommand):
    help = "Sign a C2SP checkpoint of the log's current tree with the notary key; print the note."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--log", required=True, metavar="ORIGIN", help="the log's origin")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            log = selectors.get_log(origin=options["log"])
            checkpoint = services.sign_checkpoint(log=log, signer=load_signing_key())
        except (selectors.LedgerLookupError, SigningKeyError) as exc:
            raise CommandError(str(exc)) from exc
        except selectors.TreeHeadRefused as exc:  # alerted on ledger.alerts already
            raise CommandError(f"nothing signed: {exc}; run verify_ledger") from exc
        self.stdout.write(checkpoint.note, ending="")
