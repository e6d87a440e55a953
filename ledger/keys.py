"""The notary's signing key on disk: created once, readable only by its owner, and replaced only
by rotation, which keeps every retired key beside it; and the keys of its configured witnesses."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.conf import settings

from ledger.core.cosignature import CosignerVerifier, parse_cosigner_vkey
from ledger.core.note import NoteError, Signer, parse_skey


class SigningKeyError(Exception):
    """The signing key file is missing, unreadable or malformed."""


def configured_witness_keys() -> list[CosignerVerifier]:
    """The keys of the witnesses in settings.LEDGER_WITNESSES: the only ones whose cosignatures
    count."""
    return [parse_cosigner_vkey(vkey) for _, vkey in settings.LEDGER_WITNESSES]


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


def rotate_signing_key(path: Path | None = None) -> tuple[Signer, Path]:
    """Replace the key at `path` with a new key of the same name; return it and where the old one
    was kept (`<file>.retired-<key id>`, never overwritten).

    The replacement is atomic: a reader sees the old key or the new one, never a partial file.
    The old key stays current until the new one signs its first checkpoint (sign_checkpoint),
    and is refused from then on."""
    key_path = Path(path or settings.NOTARY_SIGNING_KEY_FILE)
    old = load_signing_key(key_path)
    retired = key_path.with_name(f"{key_path.name}.retired-{old.verifier.key_id:08x}")
    _write_new_file(retired, old.skey + "\n")
    _fsync_directory(key_path.parent)
    new = Signer.generate(old.name)
    fd, temporary = tempfile.mkstemp(dir=key_path.parent, prefix=f".{key_path.name}.")  # 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(new.skey + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, key_path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(key_path.parent)
    return new, retired


def _write_new_file(path: Path, text: str) -> None:
    """Create `path` (mode 0600) holding `text`; an existing file is an error unless it already
    holds exactly `text` (a rotation interrupted after keeping the old key, run again)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        if path.read_text() == text:
            return
        raise SigningKeyError(f"{path} already exists and holds another key") from exc
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
