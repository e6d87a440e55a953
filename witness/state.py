"""The witness's own storage: the latest cosigned checkpoint per log in one JSON file, replaced
atomically (write a temporary file, fsync it, rename it over, fsync the folder) before the witness
answers; and an append-only, fsync'd JSON-lines file of refused checkpoints kept as evidence.

One process owns a state file: it holds an exclusive lock on ``<state>.lock`` while it runs."""

from __future__ import annotations

import base64
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.core.durable import replace_durably, write_all

STATE_VERSION = 1


class StateError(RuntimeError):
    """The state file is unreadable, or another process owns it."""


@dataclass(frozen=True)
class Held:
    """The latest checkpoint cosigned for one log: its size and root, and the signed note with
    the log's verified signatures and the witness's cosignature."""

    size: int
    root: bytes
    note: str


class StateStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.evidence_path = path.with_name(path.name + ".evidence.jsonl")
        self._lock_file = path.with_name(path.name + ".lock").open("a")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock_file.close()
            raise StateError(f"{path} is in use by another witness process") from exc
        self._held = _load(path)

    def close(self) -> None:
        self._lock_file.close()

    def origins(self) -> list[str]:
        return sorted(self._held)

    def latest(self, origin: str) -> Held | None:
        return self._held.get(origin)

    def save(self, origin: str, held: Held) -> None:
        """Record `held` as the log's latest and make it durable before returning."""
        updated = {**self._held, origin: held}
        document = {
            "version": STATE_VERSION,
            "logs": {
                name: {"size": h.size, "root": base64.b64encode(h.root).decode(), "note": h.note}
                for name, h in sorted(updated.items())
            },
        }
        replace_durably(self.path, json.dumps(document, indent=1).encode() + b"\n")
        self._held = updated

    def record_evidence(self, event: dict[str, Any]) -> None:
        """Append one refused checkpoint with what the witness held against it, fsync'd."""
        line = json.dumps(event, sort_keys=True).encode() + b"\n"
        fd = os.open(self.evidence_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


def _load(path: Path) -> dict[str, Held]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        document = json.loads(raw)
        if document["version"] != STATE_VERSION:
            raise StateError(f"{path} has state version {document['version']}")
        return {
            origin: Held(int(item["size"]), base64.b64decode(item["root"]), str(item["note"]))
            for origin, item in document["logs"].items()
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(f"{path} is not a witness state file: {exc}") from exc
