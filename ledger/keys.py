"""The notary's signing key on disk: created once, never overwritten, readable only by its owner."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from ledger.core.note import NoteError, Signer, parse_skey


class SigningKeyError(Exception):
    """The signing key file is missing, unreadable or malformed."""


def write_signing_key(*, path: Path, name: str) -> Signer:
    signer = Signer.generate(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: an existing key is never replaced; checkpoints it signed must stay verifiable.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise SigningKeyError(
            f"{path} already exists; refusing to overwrite a signing key"
        ) from exc
    with os.fdopen(fd, "w") as handle:
        handle.write(signer.skey + "\n")
    return signer


def load_signing_key(path: Path | None = None) -> Signer:
    key_path = Path(path or settings.NOTARY_SIGNING_KEY_FILE)
    try:
        text = key_path.read_text()
    except FileNotFoundError as exc:
        raise SigningKeyError(
            f"no signing key at {key_path}; create one with "
            f"`manage.py generate_signing_key --out {key_path}`"
        ) from exc
    except OSError as exc:
        raise SigningKeyError(f"cannot read signing key {key_path}: {exc}") from exc
    try:
        return parse_skey(text)
    except NoteError as exc:
        raise SigningKeyError(f"{key_path} is not a signing key: {exc}") from exc
