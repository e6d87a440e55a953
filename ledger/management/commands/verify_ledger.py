from __future__ import annotations

import base64
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string
from tqdm import tqdm

from ledger import selectors
from ledger.core import merkle
from ledger.core.checkpoint import (
    Checkpoint,
    CheckpointError,
    Succession,
    log_verifier,
    open_checkpoint,
    succession,
)
from ledger.core.note import NoteError, Verifier, parse_vkey
from ledger.core.verify import LogVerificationError, VerificationReport, verify_log
from ledger.keys import SigningKeyError, load_signing_key
from ledger.models import Log

# What settings.LEDGER_VERIFY_CHECKS names: a check of what other apps derived from the log
# (the notary's effect projection, the raw webhook events OBSERVED entries cite). Each returns
# its problems, one line each; the ledger imports none of those apps.
ExtraCheck = Callable[..., list[str]]


class Command(BaseCommand):
    help = (
        "Recompute a log's hash chain, Merkle tree and every stored signed checkpoint from its "
        "entries; exit non-zero naming the first bad seq. Each checkpoint must verify under one "
        "trusted key: the --vkey keys if given, else every signing key the notary has published "
        "(its own key file while none is published yet). Each --checkpoint FILE, a signed "
        "checkpoint kept outside the database, must be of this log's tree: no larger than it "
        "(else entries were removed), and the root of the entries at its size (else history "
        "was rewritten). Then the checks settings.LEDGER_VERIFY_CHECKS names are run (the "
        "notary's: the effects table as rebuild_effects --check, every OBSERVED entry's raw "
        "webhook event against the digest the entry records)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--log", required=True, metavar="ORIGIN", help="the log's origin")
        parser.add_argument(
            "--vkey", action="append", default=[], help="a trusted verifier key (repeatable)"
        )
        parser.add_argument(
            "--checkpoint",
            action="append",
            default=[],
            type=Path,
            metavar="FILE",
            help="a signed checkpoint of this log kept outside the database (repeatable)",
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            log = selectors.get_log(origin=options["log"])
            verifiers = self._verifiers(log, options["vkey"])
        except (selectors.LedgerLookupError, SigningKeyError, NoteError) as exc:
            raise CommandError(str(exc)) from exc
        held = [_read_held(path, log, verifiers) for path in options["checkpoint"]]
        report = self._walk(log, verifiers, no_progress=options["no_progress"])
        for path, checkpoint in held:
            self._check_held(log, report, path, checkpoint)
        problems = [
            problem
            for dotted in getattr(settings, "LEDGER_VERIFY_CHECKS", [])
            for problem in _extra_check(dotted)(log=log)
        ]
        if problems:
            raise CommandError("FAIL: " + "\n".join(problems))
        self.stdout.write(
            f"OK {log.origin}: {report.entries} entries, {report.nodes} Merkle nodes, "
            f"{report.checkpoints} signed checkpoints, {len(held)} held checkpoints, "
            f"root {base64.b64encode(report.root).decode()}"
        )

    def _walk(
        self, log: Log, verifiers: list[Verifier], *, no_progress: bool
    ) -> VerificationReport:
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
                disable=no_progress,
                file=self.stderr,
            ) as bar,
        ):
            try:
                return verify_log(
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

    def _check_held(
        self, log: Log, report: VerificationReport, path: Path, held: Checkpoint
    ) -> None:
        """The walk proved the stored nodes are the entries'; so the tree of the held size,
        folded from them and proved consistent with the current tree, is the entries' too."""
        evidence = f"held checkpoint {path} (size {held.size}, root {_b64(held.root)})"
        step = succession(
            held_size=held.size, held_root=held.root, size=report.entries, root=report.root
        )
        if step is Succession.ROLLBACK:
            raise CommandError(
                f"FAIL: rollback: {evidence} was signed, but the log has only "
                f"{report.entries} entries"
            )
        root = report.root if held.size == report.entries else _root_at(log, held.size)
        if root != held.root:
            raise CommandError(
                f"FAIL: fork: {evidence}, but the log's tree of size {held.size} has root "
                f"{_b64(root)}: the entries below seq {held.size} were rewritten"
            )
        if 0 < held.size < report.entries:
            try:
                merkle.verify_consistency(
                    old_size=held.size,
                    new_size=report.entries,
                    old_root=held.root,
                    new_root=report.root,
                    proof=selectors.consistency_proof(
                        log=log, old_size=held.size, new_size=report.entries
                    ),
                )
            except (merkle.ProofError, selectors.LedgerLookupError) as exc:
                raise CommandError(f"FAIL: fork: {evidence}: {exc}") from exc
        self.stdout.write(f"{evidence}: consistent with the log's tree of size {report.entries}")

    def _verifiers(self, log: Log, vkeys: list[str]) -> list[Verifier]:
        if vkeys:
            return [parse_vkey(text) for text in vkeys]
        return selectors.log_verifiers(log=log) or [log_verifier(log.origin, load_signing_key())]


def _read_held(path: Path, log: Log, verifiers: list[Verifier]) -> tuple[Path, Checkpoint]:
    try:
        note = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"held checkpoint {path}: {exc}") from exc
    try:
        return path, open_checkpoint(note, verifiers, origin=log.origin)
    except CheckpointError as exc:
        raise CommandError(f"held checkpoint {path}: {exc}") from exc


def _root_at(log: Log, size: int) -> bytes:
    try:
        return selectors.root_at(log=log, size=size)
    except selectors.LedgerLookupError as exc:
        raise CommandError(f"FAIL: {exc}") from exc


def _extra_check(dotted: str) -> ExtraCheck:
    check: ExtraCheck = import_string(dotted)
    return check


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()
