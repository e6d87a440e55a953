from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.core.note import NoteError
from ledger.keys import SigningKeyError, write_signing_key


class Command(BaseCommand):
    help = (
        "Create the notary's Ed25519 checkpoint signing key (signed-note PRIVATE+KEY form, mode "
        "0600) and print its verifier key. Checkpoints of a log are signed under the log's origin; "
        "name the key after the log to print that log's vkey."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--out", required=True, type=Path, help="file to create (never overwritten)"
        )
        parser.add_argument(
            "--name",
            default="interlock-notary",
            help="key name, e.g. the origin of the log it signs",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            signer = write_signing_key(path=options["out"], name=options["name"])
        except (SigningKeyError, NoteError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(signer.verifier.vkey)
