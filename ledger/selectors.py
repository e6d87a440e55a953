"""Reads from the ledger: logs, checkpoints, and proofs built from stored nodes.

A proof asks for the O(log n) perfect subtrees it needs in one query, never a scan of entries."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

from django.db import connection

from ledger.core import merkle
from ledger.core.checkpoint import TlogProof, log_verifier, make_tlog_proof
from ledger.core.entries import Entry as LedgerEntry
from ledger.core.merkle import NodeId
from ledger.core.note import Verifier, parse_vkey
from ledger.core.verify import LogHead, SignedCheckpoint
from ledger.models import Checkpoint, Entry, Log, MerkleNode, SigningKey, blob


class LedgerLookupError(LookupError):
    """The log, entry, checkpoint or tree size asked for does not exist."""


def get_log(*, origin: str) -> Log:
    log = Log.objects.filter(origin=origin).first()
    if log is None:
        raise LedgerLookupError(f"no log with origin {origin!r}")
    return log


def latest_checkpoint(*, log: Log) -> Checkpoint | None:
    return Checkpoint.objects.filter(log=log).order_by("-size").first()


def signing_keys() -> list[SigningKey]:
    """Every key that has signed a checkpoint, in the order they took over."""
    return list(SigningKey.objects.order_by("valid_from", "id"))


def log_verifiers(*, log: Log) -> list[Verifier]:
    """Every published signing key, as the verifier of this log's checkpoints (under its origin)."""
    return [log_verifier(log.origin, parse_vkey(key.vkey)) for key in signing_keys()]


def checkpoint_for_proof(*, log: Log, index: int, size: int | None = None) -> Checkpoint:
    """The signed checkpoint a proof of entry `index` is made against: of `size`, or the latest."""
    if size is None:
        checkpoint = latest_checkpoint(log=log)
        if checkpoint is None:
            raise LedgerLookupError(f"log {log.origin} has no signed checkpoint yet")
    else:
        checkpoint = Checkpoint.objects.filter(log=log, size=size).first()
        if checkpoint is None:
            raise LedgerLookupError(f"log {log.origin} has no signed checkpoint of size {size}")
    if not 0 <= index < checkpoint.size:
        raise LedgerLookupError(
            f"entry {index} is not covered by the checkpoint of size {checkpoint.size}"
        )
    return checkpoint


def get_entry(*, log: Log, seq: int) -> LedgerEntry:
    row = Entry.objects.filter(log=log, seq=seq).first()
    if row is None:
        raise LedgerLookupError(f"log {log.origin} has no entry {seq}")
    return row.as_ledger_entry()


def effect_entries(*, log: Log, effect_id: str) -> list[LedgerEntry]:
    """Every entry of one effect, in seq order (one index range scan)."""
    rows = Entry.objects.filter(log=log, effect_id=effect_id).order_by("seq")
    return [row.as_ledger_entry() for row in rows]


def entries_at(*, log: Log, seqs: Iterable[int]) -> list[LedgerEntry]:
    rows = Entry.objects.filter(log=log, seq__in=list(seqs)).order_by("seq")
    return [row.as_ledger_entry() for row in rows]


def iter_effect_histories(*, log: Log) -> Generator[tuple[str, list[LedgerEntry]]]:
    """(effect id, its entries in seq order) for every effect of the log, streamed."""
    rows = Entry.objects.filter(log=log).exclude(effect_id="").order_by("effect_id", "seq")
    current, history = "", list[LedgerEntry]()
    for row in rows.iterator(chunk_size=2000):
        if row.effect_id != current and history:
            yield current, history
            history = []
        current = row.effect_id
        history.append(row.as_ledger_entry())
    if history:
        yield current, history


def fetch_nodes(*, log: Log, node_ids: set[NodeId]) -> dict[NodeId, bytes]:
    """The stored hashes of these perfect subtrees, in one query (leaves are entry hashes)."""
    leaves = sorted(index for level, index in node_ids if level == 0)
    inner = sorted(node for node in node_ids if node[0] > 0)
    parts: list[str] = []
    params: list[Any] = []
    # PostgreSQL takes the ids as arrays: one parameter each however many nodes an export's
    # chunk needs, where thousands of placeholders cost more to send than to look up.
    arrays = connection.vendor == "postgresql"
    if leaves:
        wanted = "= ANY(%s)" if arrays else f"IN ({', '.join(['%s'] * len(leaves))})"
        parts.append(
            f"SELECT 0, seq, entry_hash FROM {Entry._meta.db_table} "
            f"WHERE log_id = %s AND seq {wanted}"
        )
        params += [log.pk, leaves] if arrays else [log.pk, *leaves]
    if inner:
        table = MerkleNode._meta.db_table
        if arrays:
            parts.append(
                f'SELECT n.level, n."index", n.hash FROM {table} n '
                "JOIN unnest(%s::smallint[], %s::bigint[]) AS w(level, idx) "
                'ON n.level = w.level AND n."index" = w.idx WHERE n.log_id = %s'
            )
            params += [[level for level, _ in inner], [index for _, index in inner], log.pk]
        else:
            pairs = ", ".join(["(%s, %s)"] * len(inner))
            parts.append(
                f'SELECT level, "index", hash FROM {table} '
                f'WHERE log_id = %s AND (level, "index") IN (VALUES {pairs})'
            )
            params += [log.pk, *(value for node in inner for value in node)]
    found: dict[NodeId, bytes] = {}
    if parts:
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(parts), params)
            found = {(level, index): blob(node) for level, index, node in cursor.fetchall()}
    missing = node_ids - found.keys()
    if missing:
        raise LedgerLookupError(f"log {log.origin} is missing stored nodes {sorted(missing)[:5]}")
    return found


def inclusion_proof(*, log: Log, index: int, size: int) -> list[bytes]:
    _check_size(log, size)
    ranges = merkle.inclusion_ranges(index, size)
    return merkle.hashes_for_ranges(
        ranges, fetch_nodes(log=log, node_ids=merkle.nodes_for_ranges(ranges))
    )


def consistency_proof(*, log: Log, old_size: int, new_size: int) -> list[bytes]:
    _check_size(log, new_size)
    ranges = merkle.consistency_ranges(old_size, new_size)
    return merkle.hashes_for_ranges(
        ranges, fetch_nodes(log=log, node_ids=merkle.nodes_for_ranges(ranges))
    )


def root_at(*, log: Log, size: int) -> bytes:
    _check_size(log, size)
    if size == 0:
        return merkle.EMPTY_ROOT
    return merkle.range_hash(
        0, size, fetch_nodes(log=log, node_ids=set(merkle.perfect_subtrees(0, size)))
    )


def tlog_proof(*, log: Log, index: int, size: int | None = None) -> TlogProof:
    checkpoint = checkpoint_for_proof(log=log, index=index, size=size)
    return make_tlog_proof(
        index=index,
        hashes=inclusion_proof(log=log, index=index, size=checkpoint.size),
        signed_checkpoint=checkpoint.note,
    )


def tlog_proofs(*, log: Log, indexes: Iterable[int], checkpoint: Checkpoint) -> dict[int, str]:
    """C2SP tlog-proof texts of many entries against one checkpoint, from one query for the
    union of the subtrees they need (an export proves every entry it carries)."""
    ranges = {index: merkle.inclusion_ranges(index, checkpoint.size) for index in indexes}
    needed = set().union(*(merkle.nodes_for_ranges(r) for r in ranges.values()))
    nodes = fetch_nodes(log=log, node_ids=needed)
    return {
        index: make_tlog_proof(
            index=index,
            hashes=merkle.hashes_for_ranges(path, nodes),
            signed_checkpoint=checkpoint.note,
        ).text()
        for index, path in ranges.items()
    }


def iter_entries(*, log: Log, chunk_size: int = 2000) -> Generator[LedgerEntry]:
    """Entries in seq order through a server-side cursor; close() the iterator if you stop early."""
    rows = Entry.objects.filter(log=log).order_by("seq")
    for row in rows.iterator(chunk_size=chunk_size):
        yield row.as_ledger_entry()


def iter_nodes(*, log: Log, chunk_size: int = 2000) -> Generator[tuple[NodeId, bytes]]:
    """Stored internal nodes in the order appends wrote them (which is id order)."""
    rows = MerkleNode.objects.filter(log=log).order_by("id").values_list("level", "index", "hash")
    for level, index, node in rows.iterator(chunk_size=chunk_size):
        yield (level, index), bytes(node)


def signed_checkpoints(*, log: Log) -> list[SignedCheckpoint]:
    return [
        SignedCheckpoint(size=size, note=note)
        for size, note in Checkpoint.objects.filter(log=log).values_list("size", "note")
    ]


def log_head(*, log: Log) -> LogHead:
    fresh = Log.objects.get(pk=log.pk)
    return LogHead(
        size=fresh.size, head_hash=bytes(fresh.head_hash), frontier=bytes(fresh.frontier)
    )


def _check_size(log: Log, size: int) -> None:
    current = Log.objects.filter(pk=log.pk).values_list("size", flat=True).get()
    if not 0 <= size <= current:
        raise LedgerLookupError(f"log {log.origin} has {current} entries; no tree of size {size}")
