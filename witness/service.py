"""The add-checkpoint call of C2SP tlog-witness, without HTTP: a request body in, a status,
content type and body out. Every check and the state update happen under one lock, so two
requests can never roll the recorded size back (the spec's race)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ledger.core.checkpoint import (
    Checkpoint,
    CheckpointError,
    Succession,
    log_verifier,
    open_checkpoint,
    parse_checkpoint_text,
    succession,
)
from ledger.core.cosignature import CosignerKey, cosignature_lines
from ledger.core.merkle import EMPTY_ROOT, HASH_SIZE, ProofError, verify_consistency
from ledger.core.note import Verifier
from witness.state import Held, StateStore

MAX_PROOF_LINES = 63
MAX_BODY = 64 * 1024
SIZE_CONTENT_TYPE = "text/x.tlog.size"
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
_SIG_PREFIX = "\u2014 "

logger = logging.getLogger("witness")


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: str


@dataclass(frozen=True)
class Submission:
    old_size: int
    proof: tuple[bytes, ...]
    note: str
    text: str  # the note's body as submitted: what the cosignature signs
    checkpoint: Checkpoint


class MalformedRequest(ValueError):
    """The request body is not an add-checkpoint body (400)."""


def parse_submission(body: bytes) -> Submission:
    """`old <size>`, up to 63 base64 proof hashes, an empty line, a signed checkpoint."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRequest("the body is not UTF-8") from exc
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise MalformedRequest("no empty line between the proof and the checkpoint")
    old_line, *proof_lines = head.split("\n")
    if not old_line.startswith("old "):
        raise MalformedRequest("the first line must be `old <size>`")
    old_size = _decimal(old_line[len("old ") :], "old size")
    if len(proof_lines) > MAX_PROOF_LINES:
        raise MalformedRequest(f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = tuple(_proof_hash(line) for line in proof_lines)
    split = note.rfind("\n\n")
    if split < 0:
        raise MalformedRequest("the checkpoint has no signature block")
    try:
        checkpoint = parse_checkpoint_text(note[: split + 1])
    except CheckpointError as exc:
        raise MalformedRequest(str(exc)) from exc
    return Submission(old_size, proof, note, note[: split + 1], checkpoint)


def _decimal(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or (text != "0" and text.startswith("0")):
        raise MalformedRequest(f"{what} {text!r} is not a decimal without leading zeros")
    return int(text)


def _proof_hash(line: str) -> bytes:
    try:
        value = base64.b64decode(line.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise MalformedRequest(f"proof line {line!r} is not base64") from exc
    if len(value) != HASH_SIZE:
        raise MalformedRequest(f"proof line {line!r} is not a {HASH_SIZE}-byte hash")
    return value


def origin_hash(origin: str) -> str:
    """The monitoring path's name for a log: lowercase hex SHA-256 of its origin."""
    return hashlib.sha256(origin.encode()).hexdigest()


class Witness:
    def __init__(
        self,
        *,
        key: CosignerKey,
        logs: Mapping[str, Iterable[Verifier]],
        store: StateStore,
        families: Mapping[str, Iterable[Verifier]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`logs`: each log's origin and its keys. `families`: an origin prefix and the keys of
        a notary that keeps one log per tenant under it (`<prefix>/<tenant>`), each signed
        under the log's own origin (ledger.core.checkpoint.log_verifier)."""
        self.key = key
        self.logs = {origin: tuple(verifiers) for origin, verifiers in logs.items()}
        self.families = {
            prefix.rstrip("/") + "/": tuple(verifiers)
            for prefix, verifiers in (families or {}).items()
        }
        self.store = store
        self._clock = clock
        self._lock = threading.Lock()

    def verifiers_for(self, origin: str) -> tuple[Verifier, ...] | None:
        """The keys a checkpoint of `origin` must be signed by, or None for a log not witnessed."""
        if origin in self.logs:
            return self.logs[origin]
        for prefix, keys in self.families.items():
            tenant = origin[len(prefix) :]
            if origin.startswith(prefix) and tenant and "/" not in tenant:
                return tuple(log_verifier(origin, key) for key in keys)
        return None

    def add_checkpoint(self, body: bytes) -> Reply:
        """Answer one add-checkpoint request, per the spec's status codes."""
        try:
            submission = parse_submission(body)
        except MalformedRequest as exc:
            return Reply(400, TEXT_CONTENT_TYPE, f"malformed request: {exc}\n")
        origin = submission.checkpoint.origin
        verifiers = self.verifiers_for(origin)
        if verifiers is None:
            return Reply(404, TEXT_CONTENT_TYPE, f"unknown log {origin}\n")
        try:
            open_checkpoint(submission.note, verifiers, origin=origin)
        except CheckpointError as exc:
            return Reply(403, TEXT_CONTENT_TYPE, f"{exc}\n")
        with self._lock:
            return self._add_verified(submission, verifiers)

    def checkpoint(self, hashed_origin: str) -> Reply:
        """The monitoring call: the latest cosigned checkpoint of the log named by its hash."""
        origins = {origin_hash(origin): origin for origin in [*self.logs, *self.store.origins()]}
        origin = origins.get(hashed_origin)
        held = self.store.latest(origin) if origin is not None else None
        if held is None:
            return Reply(404, TEXT_CONTENT_TYPE, "no checkpoint cosigned for that log\n")
        return Reply(200, TEXT_CONTENT_TYPE, held.note)

    def _add_verified(self, submission: Submission, verifiers: tuple[Verifier, ...]) -> Reply:
        checkpoint = submission.checkpoint
        held = self.store.latest(checkpoint.origin)
        held_size = held.size if held is not None else 0
        if submission.old_size > checkpoint.size:
            self._keep_evidence(submission, held, "old size is larger than the checkpoint size")
            return Reply(400, TEXT_CONTENT_TYPE, "old size is larger than the checkpoint size\n")
        if submission.old_size != held_size:
            if _misbehaviour(submission, held, "") != "refused":  # not a mere stale client
                self._keep_evidence(submission, held, f"old size is not {held_size}")
            return Reply(409, SIZE_CONTENT_TYPE, f"{held_size}\n")
        problem = _inconsistency(submission, held)
        if problem is not None:
            self._keep_evidence(submission, held, problem)
            return Reply(422, TEXT_CONTENT_TYPE, _evidence_text(problem, submission, held))
        body = submission.text
        cosignature = self.key.cosign(body, timestamp=max(1, int(self._clock())))
        note = body + "\n" + "".join(_log_signatures(submission.note, verifiers)) + cosignature
        self.store.save(checkpoint.origin, Held(checkpoint.size, checkpoint.root, note))
        return Reply(200, TEXT_CONTENT_TYPE, cosignature)

    def _keep_evidence(self, submission: Submission, held: Held | None, reason: str) -> None:
        """Log a refused, validly signed checkpoint; a fork (same size, another root) or a
        rollback (smaller than what was cosigned) is misbehaviour of the log, kept with both."""
        checkpoint = submission.checkpoint
        kind = _misbehaviour(submission, held, reason)
        logger.warning(
            "%s checkpoint from %s refused (%s): size %d, holding size %s; evidence in %s",
            kind,
            checkpoint.origin,
            reason,
            checkpoint.size,
            held.size if held is not None else "none",
            self.store.evidence_path,
        )
        self.store.record_evidence(
            {
                "time": int(self._clock()),
                "origin": checkpoint.origin,
                "kind": kind,
                "reason": reason,
                "old_size": submission.old_size,
                "proof": [base64.b64encode(h).decode() for h in submission.proof],
                "submitted": submission.note,
                "held": held.note if held is not None else None,
            }
        )


def _misbehaviour(submission: Submission, held: Held | None, reason: str) -> str:
    """What a refused checkpoint shows against the held one: a split view (same size, another
    root), a rollback (smaller), an inconsistent extension, or nothing ("refused")."""
    checkpoint = submission.checkpoint
    if held is None:
        return "refused"
    step = succession(
        held_size=held.size, held_root=held.root, size=checkpoint.size, root=checkpoint.root
    )
    if step is Succession.FORK:
        return "split_view"
    if step is Succession.ROLLBACK:
        return "rollback"
    if reason.startswith("consistency"):
        return "inconsistent"
    return "refused"


def _inconsistency(submission: Submission, held: Held | None) -> str | None:
    """Why the checkpoint cannot follow the held one (old size already matched), or None."""
    checkpoint = submission.checkpoint
    if checkpoint.size == 0 and checkpoint.root != EMPTY_ROOT:
        return "a checkpoint of size 0 must have the empty tree's root"
    if held is None or submission.old_size == 0:
        return "old size 0 takes an empty consistency proof" if submission.proof else None
    step = succession(
        held_size=held.size, held_root=held.root, size=checkpoint.size, root=checkpoint.root
    )
    if step is Succession.FORK:
        return f"split view: a checkpoint of size {held.size} with another root was cosigned before"
    try:
        verify_consistency(
            old_size=held.size,
            new_size=checkpoint.size,
            old_root=held.root,
            new_root=checkpoint.root,
            proof=submission.proof,
        )
    except ProofError as exc:
        return f"consistency proof from size {held.size} does not verify: {exc}"
    return None


def _evidence_text(problem: str, submission: Submission, held: Held | None) -> str:
    held_note = held.note if held is not None else "(none)\n"
    return (
        f"refused: {problem}\n\n"
        f"cosigned checkpoint held by the witness:\n{held_note}\n"
        f"submitted checkpoint:\n{submission.note}"
    )


def _log_signatures(note: str, verifiers: tuple[Verifier, ...]) -> list[str]:
    """The note's signature lines by the trusted log keys (all verified by open_checkpoint)."""
    trusted = {(v.name, v.key_id) for v in verifiers}
    kept = []
    for line in cosignature_lines(note):
        name, _, encoded = line.removeprefix(_SIG_PREFIX).partition(" ")
        key_hash = int.from_bytes(base64.b64decode(encoded)[:4], "big")
        if (name, key_hash) in trusted:
            kept.append(line)
    return kept
