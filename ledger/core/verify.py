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
    walk = _LogWalk(origin, verifiers, checkpoints, nodes)
    walk.check_checkpoints_at(0)
    for entry in entries:
        walk.append(entry)
        if progress is not None:
            progress(1)
    walk.check_nothing_left()
    if head is not None:
        walk.check_head(head)
    walk.report.entries = walk.size
    walk.report.root = walk.frontier.root()
    return walk.report


class _LogWalk:
    """What the entries walked so far give (size, last entry hash, Merkle frontier), and the
    stored nodes and signed checkpoints not yet held against them: each claim is checked as
    soon as the entries under it have been walked, so the first bad seq is the one named."""

    def __init__(
        self,
        origin: str,
        verifiers: Iterable[Verifier],
        checkpoints: Iterable[SignedCheckpoint],
        nodes: Iterable[tuple[NodeId, bytes]],
    ) -> None:
        self.origin = origin
        self.known = list(verifiers)
        self.pending = sorted(checkpoints, key=lambda c: c.size)
        self.stored_nodes: Iterator[tuple[NodeId, bytes]] = iter(nodes)
        self.frontier = Frontier()
        self.report = VerificationReport()
        self.prev_hash = genesis_hash(origin)
        self.size = 0

    def append(self, entry: Entry) -> None:
        """The next entry: it must be the next seq, link to the one before, hash to its own
        contents, and complete exactly the Merkle nodes stored next."""
        self._check_entry(entry)
        self._check_nodes(entry.entry_hash)
        self.prev_hash = entry.entry_hash
        self.size += 1
        self.check_checkpoints_at(self.size)

    def _check_entry(self, entry: Entry) -> None:
        seq = self.size
        if entry.seq != seq:
            raise LogVerificationError(seq, f"missing: the next stored entry is seq {entry.seq}")
        if entry.prev_hash != self.prev_hash:
            raise LogVerificationError(seq, "prev_hash does not link to the entry before it")
        try:
            check_entry_fields(kind=entry.kind, effect_id=entry.effect_id, body=entry.body)
        except EntryError as exc:
            raise LogVerificationError(seq, str(exc)) from exc
        if leaf_hash(entry.leaf_bytes()) != entry.entry_hash:
            raise LogVerificationError(seq, "entry hash does not match the entry's contents")

    def _check_nodes(self, entry_hash: bytes) -> None:
        """The nodes this leaf completes are the next ones stored, in order."""
        for node_id, node in self.frontier.append(entry_hash):
            stored = next(self.stored_nodes, None)
            if stored != (node_id, node):
                raise LogVerificationError(
                    self.size, f"stored Merkle node {node_id} is missing or differs"
                )
            self.report.nodes += 1

    def check_checkpoints_at(self, size: int) -> None:
        """Every checkpoint stored at `size`: signed by a known key, for this size, over the
        root of the entries walked."""
        while self.pending and self.pending[0].size == size:
            checkpoint = self.pending.pop(0)
            at = max(size - 1, 0)
            try:
                opened = open_checkpoint(checkpoint.note, self.known, origin=self.origin)
            except CheckpointError as exc:
                raise LogVerificationError(at, f"checkpoint at size {size}: {exc}") from exc
            if opened.size != size:
                raise LogVerificationError(
                    at, f"checkpoint stored at size {size} signs size {opened.size}"
                )
            if opened.root != self.frontier.root():
                raise LogVerificationError(
                    at,
                    f"signed checkpoint at size {size} does not match the entries: "
                    f"an entry below seq {size} was altered, removed or reordered",
                )
            self.report.checkpoints += 1
            self.report.checkpoint_sizes.append(size)

    def check_nothing_left(self) -> None:
        """After the last entry, no checkpoint signs a larger tree and no node is left over."""
        if self.pending:
            raise LogVerificationError(
                self.size,
                f"missing: the log ends before seq {self.size} but a checkpoint of size "
                f"{self.pending[0].size} was signed",
            )
        extra = next(self.stored_nodes, None)
        if extra is not None:
            raise LogVerificationError(
                self.size, f"stored Merkle node {extra[0]} has no entries under it"
            )

    def check_head(self, head: LogHead) -> None:
        """The log head's size, last entry hash and frontier are the entries'."""
        size = self.size
        if head.size != size:
            raise LogVerificationError(
                min(size, head.size), f"log head claims size {head.size}, entries give {size}"
            )
        if size and head.head_hash != self.prev_hash:
            raise LogVerificationError(size - 1, "log head hash differs from the last entry's")
        if head.frontier != self.frontier.to_bytes():
            raise LogVerificationError(
                max(size - 1, 0), "log head frontier differs from the entries'"
            )
