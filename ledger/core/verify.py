"""Re-derive a whole log from its entries and hold every stored hash and checkpoint against it.

The stored chain hashes, Merkle nodes, log head and signed checkpoints are all claims; this walk
recomputes each from the entries alone, in one pass and constant memory (apart from the O(log n)
frontier), and names the first seq where a claim and the entries part ways.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ledger.core.checkpoint import CheckpointError, open_checkpoint
from ledger.core.entries import Entry, EntryError, check_entry_fields, genesis_hash
from ledger.core.merkle import Frontier, NodeId, leaf_hash
from ledger.core.note import Verifier


class LogVerificationError(Exception):
    """The log disagrees with itself; `seq` is the first entry position where it does."""

    def __init__(self, seq: int, reason: str) -> None:
        super().__init__(f"seq {seq}: {reason}")
        self.seq = seq
        self.reason = reason


@dataclass(frozen=True)
class SignedCheckpoint:
    size: int
    note: str


@dataclass(frozen=True)
class LogHead:
    """What the log claims about itself: its size, last entry hash and Merkle frontier."""

    size: int
    head_hash: bytes
    frontier: bytes


@dataclass
class VerificationReport:
    entries: int = 0
    nodes: int = 0
    checkpoints: int = 0
    root: bytes = b""
    checkpoint_sizes: list[int] = field(default_factory=list)


def verify_log(
    *,
    origin: str,
    entries: Iterable[Entry],
    nodes: Iterable[tuple[NodeId, bytes]],
    checkpoints: Iterable[SignedCheckpoint],
    verifiers: Iterable[Verifier],
    head: LogHead | None = None,
    progress: Callable[[int], None] | None = None,
) -> VerificationReport:
    """Raise LogVerificationError at the first inconsistency; return counts when all holds.

    `entries` must come in seq order, `nodes` in the order they were stored (append order),
    `checkpoints` in any order."""
    known = list(verifiers)
    pending = sorted(checkpoints, key=lambda c: c.size)
    stored_nodes: Iterator[tuple[NodeId, bytes]] = iter(nodes)
    frontier = Frontier()
    report = VerificationReport()
    prev_hash = genesis_hash(origin)
    expected = 0

    def check_checkpoints_at(size: int) -> None:
        while pending and pending[0].size == size:
            checkpoint = pending.pop(0)
            try:
                opened = open_checkpoint(checkpoint.note, known, origin=origin)
            except CheckpointError as exc:
                raise LogVerificationError(
                    max(size - 1, 0), f"checkpoint at size {size}: {exc}"
                ) from exc
            if opened.size != size:
                raise LogVerificationError(
                    max(size - 1, 0), f"checkpoint stored at size {size} signs size {opened.size}"
                )
            if opened.root != frontier.root():
                raise LogVerificationError(
                    max(size - 1, 0),
                    f"signed checkpoint at size {size} does not match the entries: "
                    f"an entry below seq {size} was altered, removed or reordered",
                )
            report.checkpoints += 1
            report.checkpoint_sizes.append(size)

    check_checkpoints_at(0)
    for entry in entries:
        if entry.seq != expected:
            raise LogVerificationError(
                expected, f"missing: the next stored entry is seq {entry.seq}"
            )
        if entry.prev_hash != prev_hash:
            raise LogVerificationError(expected, "prev_hash does not link to the entry before it")
        try:
            check_entry_fields(kind=entry.kind, effect_id=entry.effect_id, body=entry.body)
        except EntryError as exc:
            raise LogVerificationError(expected, str(exc)) from exc
        if leaf_hash(entry.leaf_bytes()) != entry.entry_hash:
            raise LogVerificationError(expected, "entry hash does not match the entry's contents")
        for node_id, node in frontier.append(entry.entry_hash):
            stored = next(stored_nodes, None)
            if stored != (node_id, node):
                raise LogVerificationError(
                    expected, f"stored Merkle node {node_id} is missing or differs"
                )
            report.nodes += 1
        prev_hash = entry.entry_hash
        expected += 1
        check_checkpoints_at(expected)
        if progress is not None:
            progress(1)
    if pending:
        raise LogVerificationError(
            expected,
            f"missing: the log ends before seq {expected} but a checkpoint of size "
            f"{pending[0].size} was signed",
        )
    extra = next(stored_nodes, None)
    if extra is not None:
        raise LogVerificationError(
            expected, f"stored Merkle node {extra[0]} has no entries under it"
        )
    if head is not None:
        if head.size != expected:
            raise LogVerificationError(
                min(expected, head.size),
                f"log head claims size {head.size}, entries give {expected}",
            )
        if expected and head.head_hash != prev_hash:
            raise LogVerificationError(expected - 1, "log head hash differs from the last entry's")
        if head.frontier != frontier.to_bytes():
            raise LogVerificationError(
                max(expected - 1, 0), "log head frontier differs from the entries'"
            )
    report.entries = expected
    report.root = frontier.root()
    return report
