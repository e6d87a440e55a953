from __future__ import annotations

import base64
from contextlib import closing
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from ledger import selectors
from ledger.core.checkpoint import log_verifier
from ledger.core.note import NoteError, Verifier, parse_vkey
from ledger.core.verify import LogVerificationError, verify_log
from ledger.keys import SigningKeyError, load_signing_key
from ledger.models import Log


class Command(BaseCommand):
    help = (
        "Recompute a log's hash chain, Merkle tree and every stored signed checkpoint from its "
        "entries; exit non-zero naming the first bad seq. Each checkpoint must verify under one "
        "trusted key: the --vkey keys if given, else every signing key the notary has published "
        "(its own key file while none is published yet)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--log", required=True, metavar="ORIGIN", help="the log's origin")
        parser.add_argument(
            "--vkey", action="append", default=[], help="a trusted verifier key (repeatable)"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            log = selectors.get_log(origin=options["log"])
            verifiers = self._verifiers(log, options["vkey"])
        except (selectors.LedgerLookupError, SigningKeyError, NoteError) as exc:
            raise CommandError(str(exc)) from exc
        head = selectors.log_head(log=log)
        # closing(): a failure stops the walk early, and the server-side cursors behind the two
        # iterators must be closed then, not whenever the garbage collector gets to them.
        with (
            closing(selectors.iter_entries(log=log)) as entries,
            closing(selectors.iter_nodes(log=log)) as nodes,
            tqdm(
                total=head.size,
                unit="entry",
                desc=f"verify {log.origin}",
                disable=options["no_progress"],
                file=self.stderr,
            ) as bar,
        ):
            try:
                report = verify_log(
                    origin=log.origin,
                    entries=entries,
                    nodes=nodes,
                    checkpoints=selectors.signed_checkpoints(log=log),
                    verifiers=verifiers,
                    head=head,
                    progress=bar.update,
                )
            except LogVerificationError as exc:
                raise CommandError(f"FAIL at seq {exc.seq}: {exc.reason}") from exc
        self.stdout.write(
            f"OK {log.origin}: {report.entries} entries, {report.nodes} Merkle nodes, "
            f"{report.checkpoints} signed checkpoints, "
            f"root {base64.b64encode(report.root).decode()}"
        )

    def _verifiers(self, log: Log, vkeys: list[str]) -> list[Verifier]:
        if vkeys:
            return [parse_vkey(text) for text in vkeys]
        return selectors.log_verifiers(log=log) or [log_verifier(log.origin, load_signing_key())]
