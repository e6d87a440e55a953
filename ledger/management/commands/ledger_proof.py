from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger import selectors
from ledger.core.merkle import ProofError


class Command(BaseCommand):
    help = (
        "Print a C2SP tlog-proof that entry INDEX is in the log, against the signed checkpoint of "
        "size M (default: the latest). --entry-out writes the entry's exact leaf bytes, which is "
        "what the proof's leaf hash is computed over."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--log", required=True, metavar="ORIGIN", help="the log's origin")
        parser.add_argument("--index", required=True, type=int, metavar="N", help="the entry's seq")
        parser.add_argument("--size", type=int, metavar="M", help="size of a signed checkpoint")
        parser.add_argument(
            "--entry-out", type=Path, metavar="FILE", help="write the leaf bytes here"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            log = selectors.get_log(origin=options["log"])
            proof = selectors.tlog_proof(log=log, index=options["index"], size=options["size"])
            entry = selectors.get_entry(log=log, seq=options["index"])
        except (selectors.LedgerLookupError, ProofError) as exc:
            raise CommandError(str(exc)) from exc
        if options["entry_out"] is not None:
            try:
                options["entry_out"].write_bytes(entry.leaf_bytes())
            except OSError as exc:
                raise CommandError(f"cannot write {options['entry_out']}: {exc}") from exc
        self.stdout.write(proof.text(), ending="")
