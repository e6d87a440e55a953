"""What an insider with the PostgreSQL superuser's rights (the tests connect as one) can do to a
log, done for real: restore it from an old backup (`back_up`, `restore`: the rows written since
gone and the head put back, every row trigger skipped for that transaction only), or drop the
triggers, change rows and `cover_tracks` so every derived value agrees with the forged entries.
Only signing is beyond the insider: no new checkpoint under the notary's key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from ledger.core.entries import genesis_hash, seal_entry
from ledger.core.merkle import Frontier
from ledger.models import Entry, Log, MerkleNode

APPEND_ONLY_TABLES = (
    "ledger_entry",
    "ledger_merklenode",
    "ledger_checkpoint",
    "ledger_cosignature",
)


@dataclass(frozen=True)
class Backup:
    """The log head at the moment of the backup; the rows it covers are those below `size`."""

    log_pk: int
    size: int
    head_hash: bytes
    frontier: bytes


def back_up(log: Log) -> Backup:
    log.refresh_from_db()
    return Backup(log.pk, log.size, bytes(log.head_hash), bytes(log.frontier))


def restore(backup: Backup) -> None:
    """The log as the backup has it: what was appended and signed since, gone without a trace."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        pk, size = backup.log_pk, backup.size
        cursor.execute("DELETE FROM ledger_entry WHERE log_id = %s AND seq >= %s", [pk, size])
        cursor.execute(
            "DELETE FROM ledger_merklenode WHERE log_id = %s"
            ' AND ("index" + 1) * (2::numeric ^ level) > %s',
            [pk, size],
        )
        cursor.execute(
            "DELETE FROM ledger_cosignature WHERE checkpoint_id IN"
            " (SELECT id FROM ledger_checkpoint WHERE log_id = %s AND size > %s)",
            [pk, size],
        )
        cursor.execute("DELETE FROM ledger_checkpoint WHERE log_id = %s AND size > %s", [pk, size])
        cursor.execute(
            "UPDATE ledger_log SET size = %s, head_hash = %s, frontier = %s WHERE id = %s",
            [size, backup.head_hash, backup.frontier, pk],
        )
        # SET LOCAL would outlast this block inside a test's own transaction: triggers back on.
        cursor.execute("SET LOCAL session_replication_role = origin")


def execute(sql: str, params: list[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def drop_ledger_triggers() -> None:
    """The entries', nodes' and checkpoints' append-only triggers and the log head's
    forward-only one (inside the test's transaction, so they come back with its rollback)."""
    for table in APPEND_ONLY_TABLES:
        execute(f"DROP TRIGGER {table}_append_only ON {table}", [])
    execute("DROP TRIGGER ledger_log_forward_only ON ledger_log", [])


def cover_tracks(log: Log) -> None:
    """Make every derived value agree with the tampered entries, as they now stand in seq order.

    Renumbers the entries 0..n-1 and re-seals the chain (only rows from the tampered position on
    change), rebuilds every Merkle node in append order (so id order is append order again), and
    rewrites the log head."""
    prev_hash = genesis_hash(log.origin)
    frontier = Frontier()
    nodes: list[MerkleNode] = []
    for position, row in enumerate(Entry.objects.filter(log=log).order_by("seq")):
        sealed = seal_entry(
            seq=position,
            kind=row.kind,
            effect_id=row.effect_id,
            body=bytes(row.body),
            created_at=row.created_at,
            prev_hash=prev_hash,
        )
        if (row.seq, bytes(row.prev_hash), bytes(row.entry_hash)) != (
            sealed.seq,
            sealed.prev_hash,
            sealed.entry_hash,
        ):
            Entry.objects.filter(pk=row.pk).update(
                seq=sealed.seq, prev_hash=sealed.prev_hash, entry_hash=sealed.entry_hash
            )
        nodes.extend(
            MerkleNode(log=log, level=level, index=index, hash=node)
            for (level, index), node in frontier.append(sealed.entry_hash)
        )
        prev_hash = sealed.entry_hash
    MerkleNode.objects.filter(log=log).delete()
    MerkleNode.objects.bulk_create(nodes)
    Log.objects.filter(pk=log.pk).update(
        size=frontier.size, head_hash=prev_hash, frontier=frontier.to_bytes()
    )
