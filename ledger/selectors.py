"""Reads from the ledger: logs, checkpoints, and proofs built from stored nodes.

A proof asks for the O(log n) perfect subtrees it needs in one query, never a scan of entries."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Max, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ledger.core import merkle
from ledger.core.checkpoint import (
    CheckpointError,
    Succession,
    TlogProof,
    log_verifier,
    make_tlog_proof,
    open_checkpoint,
    succession,
)
from ledger.core.cosignature import CosignatureError
from ledger.core.entries import Entry as LedgerEntry
from ledger.core.entries import genesis_hash
from ledger.core.merkle import Frontier, NodeId, ProofError, leaf_hash
from ledger.core.note import Verifier, parse_vkey
from ledger.core.verify import LogHead, SignedCheckpoint, VerificationReport, verify_log
from ledger.keys import configured_witness_keys
from ledger.memory import SignedHead
from ledger.models import Checkpoint, Cosignature, Entry, Log, MerkleNode, SigningKey, blob


class LedgerLookupError(LookupError):
    """The log, entry, checkpoint or tree size asked for does not exist."""


class TreeHeadRefused(Exception):
    """The log's stored tree disagrees with its head row or is not an extension of what was
    signed before: history was rewritten or rolled back, so no checkpoint is signed."""


def get_log(*, origin: str) -> Log:
    log = Log.objects.filter(origin=origin).first()
    if log is None:
        raise LedgerLookupError(f"no log with origin {origin!r}")
    return log


def latest_checkpoint(*, log: Log) -> Checkpoint | None:
    """The latest signed checkpoint, cosigned or not (what witnesses are sent)."""
    return Checkpoint.objects.filter(log=log).order_by("-size").first()


def published_checkpoint(*, log: Log) -> Checkpoint | None:
    """The latest checkpoint cosigned by LEDGER_COSIGNATURE_QUORUM of the configured witnesses,
    each cosignature verified (Checkpoint.verified_cosignatures): what receipts, exports and
    /v1/checkpoints/latest show (with its `published_note`). The quorum is configuration, not
    a row a DBA could set to 0."""
    quorum = settings.LEDGER_COSIGNATURE_QUORUM
    checkpoints = Checkpoint.objects.filter(log=log)
    if not quorum:
        return checkpoints.order_by("-size").first()
    witnesses = configured_witness_keys()  # only the witnesses configured now count
    if len(witnesses) < quorum:
        return None
    trusted = Q()
    for witness in witnesses:
        trusted |= Q(
            cosignatures__witness=witness.name, cosignatures__key_id=f"{witness.key_id:08x}"
        )
    # The rows narrow the search; only the cosignatures that verify count.
    candidates = checkpoints.annotate(
        witnesses=Count("cosignatures__witness", filter=trusted, distinct=True)
    ).filter(witnesses__gte=quorum)
    for checkpoint in candidates.order_by("-size").iterator(chunk_size=8):
        if trusted_cosigners(checkpoint=checkpoint) >= quorum:
            return checkpoint
    return None


def trusted_cosigners(*, checkpoint: Checkpoint) -> int:
    """How many of the configured witnesses verifiably cosigned the checkpoint: what a quorum
    counts."""
    return len({row.witness for row in checkpoint.verified_cosignatures})


def cosignature_problems(*, log: Log) -> list[str]:
    """Stored cosignatures of the log's checkpoints by a configured witness that do not verify
    under its key: rows written past the witnessing code (a LEDGER_VERIFY_CHECKS check)."""
    keys = {(w.name, f"{w.key_id:08x}"): w for w in configured_witness_keys()}
    problems = []
    rows = Cosignature.objects.filter(checkpoint__log=log).select_related("checkpoint")
    for row in rows.order_by("checkpoint__size", "witness"):
        witness = keys.get((row.witness, row.key_id))
        if witness is None:
            continue  # a witness no longer configured: its cosignatures count for nothing here
        note = row.checkpoint.note
        try:
            verified = witness.timestamp_of(row.line, note[: note.rfind("\n\n") + 1])
        except CosignatureError as exc:
            verified, reason = None, str(exc)
        else:
            reason = "the line is not by that witness key"
        if verified is None or verified != row.timestamp:
            problems.append(
                f"cosignature of checkpoint {row.checkpoint.size} by {row.witness}: "
                f"{reason if verified is None else 'its timestamp is not the stored one'}"
            )
    return problems


def no_published_checkpoint(log: Log) -> str:
    """What a log without a published checkpoint lacks, for messages."""
    required = settings.LEDGER_COSIGNATURE_QUORUM
    return "no signed checkpoint yet" + (f" cosigned by {required} witnesses" if required else "")


def witnessed_size(*, log: Log, witness: str, key_id: str) -> int:
    """The size of the largest checkpoint of the log this witness key cosigned, else 0: the
    `old` size a witness holds for the log, unless it lost its state."""
    rows = Cosignature.objects.filter(checkpoint__log=log, witness=witness, key_id=key_id)
    return rows.aggregate(size=Max("checkpoint__size"))["size"] or 0


def signing_keys() -> list[SigningKey]:
    """Every key that has signed a checkpoint, in the order they took over."""
    return list(SigningKey.objects.order_by("valid_from", "id"))


def log_verifiers(*, log: Log) -> list[Verifier]:
    """Every published signing key, as the verifier of this log's checkpoints (under its origin)."""
    return [log_verifier(log.origin, parse_vkey(key.vkey)) for key in signing_keys()]


def checkpoint_for_proof(*, log: Log, index: int, size: int | None = None) -> Checkpoint:
    """The signed checkpoint a proof of entry `index` is made against: of `size`, or the latest."""
    if size is None:
        checkpoint = published_checkpoint(log=log)
        if checkpoint is None:
            raise LedgerLookupError(f"log {log.origin} has {no_published_checkpoint(log)}")
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


# The columns a written-out read of entries selects, in the order entries_of_rows takes them.
ENTRY_COLUMNS = ("seq", "kind", "effect_id", "body", "created_at", "prev_hash", "entry_hash")


def effect_entries(*, log: Log, effect_id: str) -> list[LedgerEntry]:
    """Every entry of one effect, in seq order (one index range scan)."""
    return effects_entries(log=log, effect_ids=[effect_id]).get(effect_id, [])


def entries_of_rows(rows: Iterable[Sequence[Any]]) -> list[LedgerEntry]:
    """The entries of rows a written-out statement read, ENTRY_COLUMNS in that order."""
    return [
        LedgerEntry(
            seq=seq,
            kind=kind,
            effect_id=effect_id,
            body=blob(body),
            created_at=_aware(created_at),
            prev_hash=blob(prev_hash),
            entry_hash=blob(entry_hash),
        )
        for seq, kind, effect_id, body, created_at, prev_hash, entry_hash in rows
    ]


def _aware(moment: datetime | str) -> datetime:
    """A datetime column as the ORM reads it: SQLite's comes back naive (or as text), in the
    connection's time zone; PostgreSQL's is aware already."""
    value = parse_datetime(moment) if isinstance(moment, str) else moment
    if value is None:
        raise LedgerLookupError(f"a stored instant that is no datetime: {moment!r}")
    return timezone.make_aware(value, connection.timezone) if timezone.is_naive(value) else value


def effects_entries(*, log: Log, effect_ids: Iterable[str]) -> dict[str, list[LedgerEntry]]:
    """Every entry of each of these effects, in seq order, in one query; an effect without
    entries is left out. Written out: it is read under the log lock on every propose, dispatch,
    outcome and ingested batch, and building it through the ORM took twice as long as running
    it."""
    wanted = sorted(set(effect_ids))
    if not wanted:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(ENTRY_COLUMNS)} FROM {Entry._meta.db_table}"
            f" WHERE log_id = %s AND effect_id IN ({', '.join(['%s'] * len(wanted))})"
            " ORDER BY effect_id, seq",
            [log.pk, *wanted],
        )
        rows = cursor.fetchall()
    histories: dict[str, list[LedgerEntry]] = {}
    for entry in entries_of_rows(rows):
        histories.setdefault(entry.effect_id, []).append(entry)
    return histories


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
            # One index scan (node_unique_position) per level: a join with the unnested pairs
            # was planned as a scan of every node of the log, once per chunk of an export.
            by_level: dict[int, list[int]] = {}
            for level, index in inner:
                by_level.setdefault(level, []).append(index)
            for level, indexes in by_level.items():
                parts.append(
                    f'SELECT level, "index", hash FROM {table} '
                    'WHERE log_id = %s AND level = %s AND "index" = ANY(%s)'
                )
                params += [log.pk, level, indexes]
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
        signed_checkpoint=checkpoint.published_note,
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
            signed_checkpoint=checkpoint.published_note,
        ).text()
        for index, path in ranges.items()
    }


def iter_entries(*, log: Log, chunk_size: int = 2000) -> Generator[LedgerEntry]:
    """Entries in seq order through a server-side cursor; close() the iterator if you stop early."""
    rows = Entry.objects.filter(log=log).order_by("seq")
    for row in rows.iterator(chunk_size=chunk_size):
        yield row.as_ledger_entry()


def iter_entries_of_kind(*, log: Log, kind: str, chunk_size: int = 2000) -> Generator[LedgerEntry]:
    """The log's entries of one kind, in seq order, through a server-side cursor."""
    rows = Entry.objects.filter(log=log, kind=kind).order_by("seq")
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


def verify_stored(*, log: Log, verifiers: Sequence[Verifier] = ()) -> VerificationReport:
    """The log as stored, checked whole: every entry once and chained, the stored tree the
    entries' and its head the log row's; with `verifiers`, every signed checkpoint as well.
    Raises LogVerificationError at the first thing that does not hold."""
    return verify_log(
        origin=log.origin,
        entries=iter_entries(log=log),
        nodes=iter_nodes(log=log),
        checkpoints=signed_checkpoints(log=log) if verifiers else [],
        verifiers=verifiers,
        head=log_head(log=log),
    )


def _check_size(log: Log, size: int) -> None:
    current = Log.objects.filter(pk=log.pk).values_list("size", flat=True).get()
    if not 0 <= size <= current:
        raise LedgerLookupError(f"log {log.origin} has {current} entries; no tree of size {size}")


def checked_tree_root(
    *, log: Log, verifiers: Iterable[Verifier], held: Sequence[tuple[str, SignedHead]] = ()
) -> bytes:
    """The root of the log's current tree, recomputed from the stored nodes and entries and
    checked against the head row, the latest stored checkpoint and every head in `held` (what
    was signed as the database cannot show: the notary's memory, the witnesses' latest, each
    named for messages); raise TreeHeadRefused if the database disagrees with itself or with
    what was signed before. O(log n) rows per head.

    `verifiers` are the keys the latest checkpoint must verify under. The caller holds the log's
    row lock (sign_checkpoint), so no append is halfway through."""
    size = log.size
    latest = Checkpoint.objects.filter(log=log).order_by("-size").first()
    if latest is not None and latest.size > size:
        raise TreeHeadRefused(
            f"the log has {size} entries but a checkpoint of size {latest.size} was signed: "
            "entries were removed (a rollback)"
        )
    try:
        frontier = Frontier.from_bytes(size, bytes(log.frontier))
        root = root_at(log=log, size=size)
    except (ProofError, LedgerLookupError) as exc:
        raise TreeHeadRefused(f"the tree of size {size} cannot be rebuilt: {exc}") from exc
    if frontier.root() != root:
        raise TreeHeadRefused(
            f"the log head's frontier does not give the root of the stored nodes at size {size}"
        )
    _check_last_entry(log, size)
    if latest is not None and latest.size > 0:
        _check_consistent(log, latest, size, root, list(verifiers))
    for who, head in held:
        _check_extends(log, who, head, size, root)
    return root


def _check_extends(log: Log, who: str, head: SignedHead, size: int, root: bytes) -> None:
    """The tree of `size` is `head` or, by a consistency proof from the stored nodes, extends it."""
    step = succession(held_size=head.size, held_root=head.root, size=size, root=root)
    if step is Succession.ROLLBACK:
        raise TreeHeadRefused(
            f"the log has {size} entries but {who} holds a signed tree of size {head.size}: "
            "the log was rolled back"
        )
    if step is Succession.FORK:
        raise TreeHeadRefused(
            f"{who} holds a signed tree of size {size} with another root: the log was rewritten"
        )
    if step is Succession.SAME or head.size == 0:
        return
    try:
        merkle.verify_consistency(
            old_size=head.size,
            new_size=size,
            old_root=head.root,
            new_root=root,
            proof=consistency_proof(log=log, old_size=head.size, new_size=size),
        )
    except (ProofError, LedgerLookupError) as exc:
        raise TreeHeadRefused(
            f"the tree of size {size} is not consistent with the tree of size {head.size} "
            f"{who} holds: the log was rewritten ({exc})"
        ) from exc


def _check_last_entry(log: Log, size: int) -> None:
    """The head row names the last stored entry, which hashes to its contents, and none after."""
    if size == 0:
        head_ok = bytes(log.head_hash) == genesis_hash(log.origin)
    else:
        rows = Entry.objects.filter(log=log, seq=size - 1)
        last = next((row.as_ledger_entry() for row in rows), None)
        head_ok = (
            last is not None
            and bytes(log.head_hash) == last.entry_hash
            and leaf_hash(last.leaf_bytes()) == last.entry_hash
        )
    if not head_ok:
        raise TreeHeadRefused(f"the log head does not name the last entry (seq {size - 1})")
    if Entry.objects.filter(log=log, seq__gte=size).exists():
        raise TreeHeadRefused(f"entries are stored past the log head's size {size}")


def _check_consistent(
    log: Log, latest: Checkpoint, size: int, root: bytes, verifiers: list[Verifier]
) -> None:
    """The stored nodes prove the tree of `size` extends the latest signed checkpoint."""
    try:
        signed = open_checkpoint(latest.note, verifiers, origin=log.origin)
        if signed.size != latest.size or signed.root != bytes(latest.root):
            raise CheckpointError(f"the note stored at size {latest.size} signs another tree")
        proof = (
            []
            if latest.size == size
            else consistency_proof(log=log, old_size=latest.size, new_size=size)
        )
        merkle.verify_consistency(
            old_size=signed.size, new_size=size, old_root=signed.root, new_root=root, proof=proof
        )
    except (ProofError, CheckpointError, LedgerLookupError) as exc:
        raise TreeHeadRefused(
            f"the tree of size {size} is not consistent with the checkpoint signed at size "
            f"{latest.size}: {exc}"
        ) from exc
