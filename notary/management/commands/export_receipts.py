from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime
from tqdm import tqdm

from ledger.keys import SigningKeyError, load_signing_key
from ledger.models import Checkpoint, Log
from ledger.selectors import TreeHeadRefused, latest_checkpoint
from ledger.services import sign_checkpoint
from notary.errors import NotaryConflict, NotaryInputError
from notary.exports import check_state_filter, export_receipts
from notary.models import Tenant


class Command(BaseCommand):
    help = (
        "Write a tenant's receipts as an interlock-receipts-export/v3 file (JSON Lines) that "
        "auditors check offline with `python -m gate_client.verify FILE --vkey VKEY`. "
        "A log that grew since its latest checkpoint gets a new one, signed with the notary's "
        "key (NOTARY_SIGNING_KEY_FILE), first; the export is as of the latest published one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--out", type=Path, required=True, help="file to write")
        parser.add_argument("--from", dest="since", help="proposed at or after (ISO 8601)")
        parser.add_argument("--to", dest="until", help="proposed before (ISO 8601)")
        parser.add_argument("--state", help="final state, or a prefix ending in *")
        parser.add_argument(
            "--tlog-proofs",
            action="store_true",
            help="prove each entry with a whole C2SP tlog-proof (the v1 format, several times "
            "larger) for tools that check tlog-proofs alone",
        )
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        since, until = (
            _moment(options[name], option)
            for name, option in (("since", "--from"), ("until", "--to"))
        )
        out: Path = options["out"]
        if options["state"] is not None:
            try:
                check_state_filter(options["state"])
            except NotaryInputError as exc:
                raise CommandError(f"{exc}; {out} was not written") from exc
        latest = _latest_of_whole_log(tenant.log)
        # Counted in entries given their line, of the checkpoint's size: lines are not known
        # ahead (a receipt line carries several entries, and the filter leaves effects out).
        bar = tqdm(
            unit=" entries",
            disable=options["no_progress"] or None,
            file=sys.stderr,
            desc="export",
        )
        covered = 0

        def progress(done: int, total: int) -> None:
            nonlocal covered
            covered = total
            bar.total = total
            bar.update(done - bar.n)

        written = 0
        try:
            with _replacing(out) as handle:
                for line in export_receipts(
                    tenant=tenant,
                    since=since,
                    until=until,
                    state=options["state"],
                    progress=progress,
                    tlog_proofs=options["tlog_proofs"],
                ):
                    handle.write(line)
                    written += 1
        except NotaryConflict as exc:
            raise CommandError(f"{exc.detail}; {out} was not written") from exc
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc}") from exc
        finally:
            bar.close()
        self.stdout.write(f"{out}: {written} lines, the log's entries [0, {covered})")
        if covered < latest.size:
            self.stderr.write(
                f"the latest checkpoint, of size {latest.size}, is not published yet (it awaits "
                f"its witnesses' cosignatures): this export is as of size {covered}"
            )


def _latest_of_whole_log(log: Log) -> Checkpoint:
    """The latest checkpoint, newly signed unless it covers the whole log already: an export is
    as of a checkpoint, and the notary's beat signs the next one only so often."""
    latest = latest_checkpoint(log=log)
    if latest is not None and latest.size >= log.size:
        return latest
    try:
        return sign_checkpoint(log=log, signer=load_signing_key())
    except SigningKeyError as exc:
        raise CommandError(f"cannot sign a checkpoint of {log.origin}: {exc}") from exc
    except TreeHeadRefused as exc:  # alerted on ledger.alerts already
        raise CommandError(f"nothing signed: {exc}; run verify_ledger") from exc


@contextmanager
def _replacing(path: Path) -> Iterator[TextIO]:
    """A temporary file beside `path` that replaces it only once it is whole: an export that
    fails halfway leaves no file (and an earlier export at `path` as it was)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _moment(text: str | None, option: str) -> Any:
    if text is None:
        return None
    moment = parse_datetime(text)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"{option}: an ISO 8601 time with a zone, e.g. 2026-11-01T00:00Z")
    return moment
