"""What the notary last signed for each log, kept outside the database, beside its signing key.

The database's checkpoint rows are not the notary's memory: a DBA who deletes them (or restores
an old backup) would otherwise let the notary sign a rollback, a regrowth or a rewrite of a tree
it already signed. sign_checkpoint checks every new tree against the head remembered here, and
remembers each head it signs before the checkpoint commits (a head remembered whose row never
committed is one the log's next tree still extends). One small JSON file per notary, replaced
durably (ledger.core.durable); writers of several processes take turns on ``<file>.lock``."""

from __future__ import annotations

import base64
import fcntl
import json
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from ledger.core.durable import replace_durably

MEMORY_VERSION = 1


class SignedMemoryError(RuntimeError):
    """The memory file is unreadable or malformed: nothing is signed until an operator looks."""


@dataclass(frozen=True)
class SignedHead:
    size: int
    root: bytes


def memory_path() -> Path:
    """NOTARY_SIGNED_HEADS_FILE, or `<signing key file>.signed` beside the key."""
    if settings.NOTARY_SIGNED_HEADS_FILE:
        return Path(settings.NOTARY_SIGNED_HEADS_FILE)
    key = Path(settings.NOTARY_SIGNING_KEY_FILE)
    return key.with_name(key.name + ".signed")


def remembered_head(*, origin: str) -> SignedHead | None:
    """The last head signed for the log, or None if this notary never signed one."""
    return _load(memory_path()).get(origin)


def remember_head(*, origin: str, head: SignedHead) -> None:
    """Record `head` as the log's last signed head, durably, before returning."""
    path = memory_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_name(path.name + ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a read-modify-write: one writer at a time
        heads = {**_load(path), origin: head}
        document = {
            "version": MEMORY_VERSION,
            "logs": {
                name: {"size": h.size, "root": base64.b64encode(h.root).decode()}
                for name, h in sorted(heads.items())
            },
        }
        replace_durably(path, json.dumps(document, indent=1).encode() + b"\n")


def _load(path: Path) -> dict[str, SignedHead]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SignedMemoryError(f"cannot read the notary's signed heads {path}: {exc}") from exc
    try:
        document = json.loads(raw)
        if document["version"] != MEMORY_VERSION:
            raise SignedMemoryError(f"{path} has version {document['version']}")
        return {
            origin: SignedHead(int(item["size"]), base64.b64decode(item["root"], validate=True))
            for origin, item in document["logs"].items()
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise SignedMemoryError(f"{path} is not the notary's signed heads: {exc}") from exc
