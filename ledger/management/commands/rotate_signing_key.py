from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ledger.keys import SigningKeyError, rotate_signing_key


class Command(BaseCommand):
    help = (
        "Replace the notary's checkpoint signing key (NOTARY_SIGNING_KEY_FILE) with a new key of "
        "the same name, atomically, and print the new verifier key. The old key file is kept as "
        "<file>.retired-<key id>. Workers load the key per run, so the next checkpoint is signed "
        "with the new key; from then on the old key is retired and refused, and both stay "
        "published with their periods (GET /v1/keys)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            signer, retired = rotate_signing_key()
        except (SigningKeyError, OSError) as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"Installed a new key at {settings.NOTARY_SIGNING_KEY_FILE}; "
            f"the old one is kept at {retired}."
        )
        self.stdout.write(signer.verifier.vkey)
