"""The witness's own storage: the latest cosigned checkpoint per log in one JSON file, replaced
atomically (write a temporary file, fsync it, rename it over, fsync the folder) before the witness
answers; and an append-only, fsync'd JSON-lines file of refused checkpoints kept as evidence.

One process owns a state file: it holds an exclusive lock on ``<state>.lock`` while it runs.

A witness that starts over forgets what it cosigned and would cosign a fork of it, so it never
does so silently: a missing state file is refused (only `python -m witness init` creates one),
and every save bumps a generation number kept in the state and, written after it, in
``<state>.generation``: a state file put back from an older copy is behind that record, and
refused at start."""

from __future__ import annotations

import base64
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.core.durable import replace_durably, write_all

STATE_VERSION = 2  # 2: with the generation number


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
        self.generation_path = path.with_name(path.name + ".generation")
        self._lock_file = path.with_name(path.name + ".lock").open("a")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock_file.close()
            raise StateError(f"{path} is in use by another witness process") from exc
        try:
            self._generation, self._held = _load(path)
            self._check_generation()
        except StateError:
            self._lock_file.close()
            raise

    @classmethod
    def initialise(cls, path: Path) -> None:
        """Create a new, empty state (and its generation record); never over an existing one."""
        if path.exists():
            raise StateError(
                f"{path} exists: a witness's state is initialised once; starting it over would "
                "forget what it cosigned"
            )
        _write_state(path, 0, {})
        replace_durably(path.with_name(path.name + ".generation"), b"0\n")

    def _check_generation(self) -> None:
        """The state is at least as new as the last generation this witness recorded."""
        try:
            recorded = int(self.generation_path.read_text(encoding="ascii"))
        except FileNotFoundError as exc:
            raise StateError(
                f"{self.generation_path} is missing: the record of how far {self.path} got is "
                "gone, so a state put back from an older copy could not be told apart"
            ) from exc
        except (OSError, ValueError) as exc:
            raise StateError(f"{self.generation_path} is unreadable: {exc}") from exc
        if self._generation < recorded:
            raise StateError(
                f"{self.path} is at generation {self._generation}, but this witness recorded "
                f"generation {recorded} ({self.generation_path}): the state was rolled back "
                "(restored from an older copy), and on it the witness would cosign a fork of what "
                "it cosigned since; refusing to start"
            )

    def close(self) -> None:
        self._lock_file.close()

    def origins(self) -> list[str]:
        return sorted(self._held)

    def latest(self, origin: str) -> Held | None:
        return self._held.get(origin)

    def save(self, origin: str, held: Held) -> None:
        """Record `held` as the log's latest and make it durable before returning; then the
        new generation in the record (a crash between leaves the state ahead, which is fine)."""
        updated = {**self._held, origin: held}
        generation = self._generation + 1
        _write_state(self.path, generation, updated)
        replace_durably(self.generation_path, f"{generation}\n".encode())
        self._generation, self._held = generation, updated

    def record_evidence(self, event: dict[str, Any]) -> None:
        """Append one refused checkpoint with what the witness held against it, fsync'd."""
        line = json.dumps(event, sort_keys=True).encode() + b"\n"
        fd = os.open(self.evidence_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_state(path: Path, generation: int, held: dict[str, Held]) -> None:
    document = {
        "version": STATE_VERSION,
        "generation": generation,
        "logs": {
            name: {"size": h.size, "root": base64.b64encode(h.root).decode(), "note": h.note}
            for name, h in sorted(held.items())
        },
    }
    replace_durably(path, json.dumps(document, indent=1).encode() + b"\n")


def _load(path: Path) -> tuple[int, dict[str, Held]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise StateError(
            f"{path} does not exist: a witness without its state would cosign a fork of what "
            "it cosigned before. Restore it, or start a new witness's state with "
            f"`python -m witness init --state {path}`"
        ) from exc
    try:
        document = json.loads(raw)
        if document["version"] != STATE_VERSION:
            raise StateError(f"{path} has state version {document['version']}")
        held = {
            origin: Held(int(item["size"]), base64.b64decode(item["root"]), str(item["note"]))
            for origin, item in document["logs"].items()
        }
        return int(document["generation"]), held
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(f"{path} is not a witness state file: {exc}") from exc
