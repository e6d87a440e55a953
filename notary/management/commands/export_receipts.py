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

from notary.errors import NotaryConflict
from notary.exports import export_receipts
from notary.models import Effect, Tenant


class Command(BaseCommand):
    help = (
        "Write a tenant's receipts as an interlock-receipts-export/v1 file (JSON Lines) that "
        "auditors check offline with `python -m gate_client.verify FILE --vkey VKEY`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--out", type=Path, required=True, help="file to write")
        parser.add_argument("--from", dest="since", help="proposed at or after (ISO 8601)")
        parser.add_argument("--to", dest="until", help="proposed before (ISO 8601)")
        parser.add_argument("--state", help="final state, or a prefix ending in *")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        since, until = (_moment(options[name], name) for name in ("since", "until"))
        total = Effect.objects.filter(tenant=tenant).count() + tenant.log.size
        bar = tqdm(
            total=total,
            unit=" lines",
            disable=options["no_progress"] or None,
            file=sys.stderr,
            desc="export",
        )
        written = 0
        out: Path = options["out"]
        try:
            with _replacing(out) as handle:
                for line in export_receipts(
                    tenant=tenant, since=since, until=until, state=options["state"]
                ):
                    handle.write(line)
                    written += 1
                    bar.update(1)
        except NotaryConflict as exc:
            raise CommandError(f"{exc.detail}; {out} was not written") from exc
        except OSError as exc:
            raise CommandError(f"cannot write {out}: {exc}") from exc
        finally:
            bar.close()
        self.stdout.write(f"{out}: {written} lines")


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


def _moment(text: str | None, name: str) -> Any:
    if text is None:
        return None
    moment = parse_datetime(text)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"--{name}: an ISO 8601 time with a zone, e.g. 2026-11-01T00:00Z")
    return moment
