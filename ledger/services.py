"""Writes to the ledger: appending entries and signing checkpoints.

Appends to one log are serialized on its Log row (SELECT ... FOR UPDATE), which is what makes seq
gapless and the chain and tree single-file under any number of writer processes. The lock lasts
until the caller's transaction commits, so a caller that records a state change and its entry in
one transaction also orders them in the log.

Group commit: work on a log started outside a transaction (in_log_order, and append_entries on
its own) is combined with what other threads of the process want of the same log at that moment
(ledger.core.combining). One thread takes the lock, does every waiting caller's work in order,
each still under the lock and after all before it, commits once, and then answers them all: one
disk flush for the batch instead of one per caller, and nobody hears "done" before the commit."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar, cast

import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ledger import memory, selectors
from ledger.core.canonical import CanonicalJSONError, canonical_json
from ledger.core.checkpoint import Checkpoint as CheckpointText
from ledger.core.checkpoint import log_verifier
from ledger.core.combining import Combiner, Take, Turn
from ledger.core.cosignature import CosignatureError, CosignerVerifier
from ledger.core.entries import Entry as LedgerEntry
from ledger.core.entries import (
    EntryError,
    check_entry_fields,
    check_entry_labels,
    genesis_hash,
    seal_entry,
)
from ledger.core.merkle import Frontier, NodeId
from ledger.core.note import Signer, is_valid_key_name
from ledger.keys import SigningKeyError
from ledger.models import (
    ORIGIN_MAX_LENGTH,
    Checkpoint,
    Cosignature,
    Entry,
    Log,
    MerkleNode,
    SigningKey,
)

# Signing refused because the stored history disagrees with itself or with what was signed.
alerts = logging.getLogger("ledger.alerts")
logger = logging.getLogger(__name__)


class LedgerInputError(ValueError):
    """The caller asked for something the ledger refuses; nothing was written."""


class RetiredSigningKeyError(SigningKeyError):
    """The signing key was replaced by a newer one, and a retired key never signs again."""


@dataclass(frozen=True)
class NewEntry:
    kind: str
    body: Mapping[str, Any] | bytes
    effect_id: str = ""


def ensure_log(*, origin: str) -> Log:
    """The log with this origin, created empty if it does not exist yet (safe under races)."""
    if len(origin) > ORIGIN_MAX_LENGTH or not is_valid_key_name(origin):
        raise LedgerInputError(
            f"invalid origin {origin!r}: at most {ORIGIN_MAX_LENGTH} characters, "
            "no spaces, no '+' (it names the checkpoint signing key)"
        )
    log = Log.objects.filter(origin=origin).first()
    if log is not None:
        return log
    try:
        with transaction.atomic():
            return Log.objects.create(origin=origin, head_hash=genesis_hash(origin))
    except IntegrityError:
        return Log.objects.get(origin=origin)


def append_entry(
    *, log: Log, kind: str, body: Mapping[str, Any] | bytes, effect_id: str = ""
) -> Entry:
    return append_entries(log=log, items=[NewEntry(kind=kind, body=body, effect_id=effect_id)])[0]


def lock_log(*, log: Log) -> datetime:
    """Take the log's append lock until the current transaction ends; return the time to stamp
    on what the caller appends, so a check made now and the entry recording it share one instant."""
    if not connection.in_atomic_block:
        raise LedgerInputError("lock_log needs a transaction to hold the lock in")
    if log.pk not in _batch_heads():  # a batch's leader holds it already
        _read_head(log)
    return timezone.now()


def in_log_order(*, log: Log, work: Callable[[datetime], T]) -> T:
    """Run `work(now)` holding the log's append lock, so that what it reads and the entries it
    appends sit after every entry before them and before every entry after them, in one
    transaction; return its result once that transaction has committed. `now` is the instant to
    check against and to stamp on those entries.

    The work is combined with other threads' (group commit, above): it shares their transaction
    and commit, inside a savepoint of its own when it shares, so what it raises undoes its own
    writes only. Inside a caller's transaction it is refused, as transaction.atomic(durable=True)
    refuses, since "committed" could not be promised there."""
    if connection.in_atomic_block:
        # Refused, but in a test case's transaction: there its savepoint stands in for the
        # transaction of its own the work would have outside.
        with transaction.atomic(durable=True):
            return work(lock_log(log=log))
    return cast(T, _combined(log, _Work(run=work)))


def append_entries(
    *, log: Log, items: Sequence[NewEntry], created_at: datetime | None = None
) -> list[Entry]:
    """Append entries in order, all in one transaction; return them with their seqs.

    Everything that can be done without the lock (encoding, validation) is done before taking
    it; under it, the entries, their Merkle nodes and the new head are one statement. Outside a
    transaction the append is group-committed (above) and returns once committed. `created_at`
    is for a caller holding lock_log(); by default the entries are stamped under the lock."""
    prepared = [_checked_item(item) for item in items]
    if not connection.in_atomic_block:
        if created_at is not None:
            raise LedgerInputError("created_at is for a caller holding lock_log()")
        return cast(list[Entry], _combined(log, _Work(run=None, entries=prepared, log=log)))
    with transaction.atomic(savepoint=False):
        return _append_locked(log, prepared, created_at or timezone.now())


T = TypeVar("T")
Prepared = tuple[bytes, NewEntry]  # an item with its body's canonical bytes, checked
Head = tuple[int, bytes, bytes]  # size, head hash, Merkle frontier, as the log row keeps them


@dataclass(frozen=True)
class _Work:
    """One caller's turn in a batch: work to run under the lock, or (run None) entries to append
    to the caller's `log` (whose head fields are brought up to date, as an append in the
    caller's own transaction would)."""

    run: Callable[[datetime], Any] | None
    entries: Sequence[Prepared] = ()
    log: Log | None = None


# The log heads a thread holds the lock of while it leads their batch ({log id: Head}): the
# batch's appends read and move the head here instead of reading the row again.
_leader = threading.local()
_combiners: dict[tuple[str, int], Combiner[_Work]] = {}
_combiners_mutex = threading.Lock()


def _batch_heads() -> dict[int, Head]:
    heads: dict[int, Head] | None = getattr(_leader, "heads", None)
    if heads is None:
        heads = _leader.heads = {}
    return heads


def _combined(log: Log, work: _Work) -> object:
    with _combiners_mutex:
        combiner = _combiners.setdefault((connection.alias, log.pk), Combiner())
    turn = Turn(work)
    combiner.submit(turn, partial(_lead, log))
    return turn.outcome()


def _lead(log: Log, take: Take[_Work]) -> None:
    """Run one batch: lock the log, take what waits, do it in order, commit once."""
    committed = False

    def mark_committed() -> None:
        nonlocal committed
        committed = True

    heads = _batch_heads()
    try:
        with transaction.atomic(durable=True):
            transaction.on_commit(mark_committed)  # the first hook: runs before any work's
            heads[log.pk] = _read_head(log)
            try:
                _run_batch(log, take())
            finally:
                del heads[log.pk]
    except Exception:
        if not committed:
            raise  # nothing of the batch is written: every turn's error
        # A work's commit hook failed after the commit: the results stand.
        logger.exception("ledger %s: a commit hook failed after a batch committed", log.origin)


def _run_batch(log: Log, batch: list[Turn[_Work]]) -> None:
    """Each turn in arrival order; consecutive plain appends written as one."""
    shared = len(batch) > 1
    appends: list[Turn[_Work]] = []
    for turn in batch:
        if turn.work.run is None:
            appends.append(turn)
            continue
        _append_turns(log, appends)
        appends = []
        if not shared:
            turn.result = turn.work.run(timezone.now())  # what it raises fails the batch: itself
            continue
        before = _batch_heads()[log.pk]
        try:
            with transaction.atomic():  # a savepoint: a refusal undoes this turn only
                turn.result = turn.work.run(timezone.now())
        except Exception as exc:
            _batch_heads()[log.pk] = before
            turn.error = exc
    _append_turns(log, appends)


def _append_turns(log: Log, turns: Sequence[Turn[_Work]]) -> None:
    if not turns:
        return
    rows = _append_locked(log, [item for turn in turns for item in turn.work.entries], None)
    for turn in turns:
        turn.result, rows = rows[: len(turn.work.entries)], rows[len(turn.work.entries) :]
        owner = turn.work.log
        if owner is not None:
            owner.size, owner.head_hash, owner.frontier = _batch_heads()[log.pk]


def _append_locked(log: Log, prepared: Sequence[Prepared], now: datetime | None) -> list[Entry]:
    appending = Appending(log=log, created_at=now)
    for item in prepared:
        appending._seal(item)
    return appending.write()


class Appending:
    """Entries of one log sealed one at a time, each known (seq, hash, instant) as soon as it is
    added, and written together by write(): one statement for a batch in which what is appended
    next depends on what was appended before. For a caller holding lock_log() in its
    transaction; nothing else may append to the log in that transaction until write().
    `created_at` as for append_entries: by default, stamped once the head is read under the lock."""

    def __init__(self, *, log: Log, created_at: datetime | None = None) -> None:
        if not connection.in_atomic_block:
            raise LedgerInputError("Appending is for a caller holding lock_log()")
        self._log = log
        size, self._prev_hash, frontier = _batch_heads().get(log.pk) or _read_head(log)
        self._frontier = Frontier.from_bytes(size, frontier)
        self._created_at = created_at or timezone.now()
        self._sealed: list[LedgerEntry] = []
        self._nodes: list[tuple[NodeId, bytes]] = []

    def add(self, item: NewEntry) -> LedgerEntry:
        """Check the entry and seal it after every one added before it; write() stores it."""
        return self._seal(_checked_item(item))

    def _seal(self, prepared: Prepared) -> LedgerEntry:
        body, item = prepared
        entry = seal_entry(
            seq=self._frontier.size,
            kind=item.kind,
            effect_id=item.effect_id,
            body=body,
            created_at=self._created_at,
            prev_hash=self._prev_hash,
        )
        self._nodes.extend(self._frontier.append(entry.entry_hash))
        self._sealed.append(entry)
        self._prev_hash = entry.entry_hash
        return entry

    def write(self) -> list[Entry]:
        """Store the entries added since the last write, their Merkle nodes and the new head, in
        one statement; return their rows."""
        if not self._sealed:
            return []
        log = self._log
        head = (self._frontier.size, self._prev_hash, self._frontier.to_bytes())
        ids = _write(log_id=log.pk, entries=self._sealed, nodes=self._nodes, head=head)
        heads = _batch_heads()
        if log.pk in heads:
            heads[log.pk] = head
        log.size, log.head_hash, log.frontier = head
        rows = [_entry_row(ids[entry.seq], log, entry) for entry in self._sealed]
        self._sealed, self._nodes = [], []
        return rows


def _read_head(log: Log) -> Head:
    """The log's head row, locked until the transaction ends."""
    with connection.cursor() as cursor:
        # SQLite has no row locks; its IMMEDIATE transactions (settings) serialize writers instead.
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        cursor.execute(_READ_HEAD + lock, [log.pk])
        size, head_hash, frontier = cursor.fetchone()
    return size, bytes(head_hash), bytes(frontier)


def _checked_item(item: NewEntry) -> Prepared:
    body = _encode_body(item.body)
    try:
        if isinstance(item.body, Mapping):
            # Encoded here, from a mapping: a canonical JSON object already, not parsed again.
            check_entry_labels(kind=item.kind, effect_id=item.effect_id)
        else:
            check_entry_fields(kind=item.kind, effect_id=item.effect_id, body=body)
    except EntryError as exc:
        raise LedgerInputError(str(exc)) from exc
    return body, item


def sign_checkpoint(*, log: Log, signer: Signer) -> Checkpoint:
    """Sign the log's current tree head; the same size signed twice returns the first checkpoint.

    Before signing, the tree is checked against what was signed before it
    (selectors.checked_tree_root): the root is recomputed from the stored Merkle nodes, never
    taken from the head row alone, and proved consistent with the latest stored checkpoint from
    those nodes. A tree that fails is refused with TreeHeadRefused, logged as critical on the
    "ledger.alerts" logger, and nothing is signed.

    The signer's public key is published (SigningKey) with the first checkpoint it signs, which
    closes the period of the key before it, in the same transaction. A key whose period is
    closed is refused with RetiredSigningKeyError: an old key file put back never signs again.

    What the database cannot be trusted to show is checked too: the head the notary remembers
    signing (ledger.memory, beside the key) and the latest checkpoint each configured witness
    holds (asked before the lock is taken). The tree must be each of them or extend it by a
    consistency proof; a log cut back below them, or regrown or rewritten, is refused."""
    from ledger.witnessing import witnessed_heads  # it imports this module

    known = [*selectors.log_verifiers(log=log), log_verifier(log.origin, signer)]
    try:
        held = witnessed_heads(log=log, verifiers=known)
        try:
            remembered = memory.remembered_head(origin=log.origin)
        except memory.SignedMemoryError as exc:
            raise selectors.TreeHeadRefused(str(exc)) from exc
        if remembered is not None:
            held.insert(0, ("the notary's memory of what it signed", remembered))
        with transaction.atomic():
            # The row lock gives a size and frontier no appender is halfway through.
            locked = Log.objects.select_for_update().get(pk=log.pk)
            root = selectors.checked_tree_root(log=locked, verifiers=known, held=held)
            registered = _hold_signing_key(signer)
            existing = Checkpoint.objects.filter(log=locked, size=locked.size).first()
            if existing is not None:
                return existing
            text = CheckpointText(origin=locked.origin, size=locked.size, root=root)
            checkpoint = Checkpoint.objects.create(
                log=locked, size=locked.size, root=root, note=text.sign(signer)
            )
            if not registered:
                _register_signing_key(signer, since=checkpoint.created_at)
            memory.remember_head(origin=locked.origin, head=memory.SignedHead(locked.size, root))
            transaction.on_commit(partial(_send_to_witnesses, checkpoint.pk))
            return checkpoint
    except selectors.TreeHeadRefused as refused:
        alerts.critical(
            "ledger %s: checkpoint signing refused: %s", log.origin, refused, extra={"log": log.pk}
        )
        raise


def _send_to_witnesses(checkpoint_id: int) -> None:
    """Queue the new checkpoint for the configured witnesses, once it is committed."""
    if settings.LEDGER_WITNESSES:
        from ledger.tasks import witness_checkpoint  # the tasks module imports this one

        witness_checkpoint.delay(checkpoint_id)


def record_cosignature(
    *, checkpoint: Checkpoint, witness: CosignerVerifier, line: str
) -> Cosignature:
    """Keep a witness's cosignature of the checkpoint once it verifies under the witness's key;
    CosignatureError if it does not, or is by another key. Recording it again is a no-op; a
    later cosignature of the same checkpoint (a refresh) is kept beside it."""
    body = checkpoint.note[: checkpoint.note.rfind("\n\n") + 1]
    timestamp = witness.timestamp_of(line, body)
    if timestamp is None:
        raise CosignatureError(f"the witness's answer is not a cosignature by {witness.name}")
    cosignature, _ = Cosignature.objects.get_or_create(
        checkpoint=checkpoint,
        witness=witness.name,
        key_id=f"{witness.key_id:08x}",
        timestamp=timestamp,
        defaults={"line": line},
    )
    return cosignature


def _hold_signing_key(signer: Signer) -> bool:
    """Lock the signer's registry row until commit, so it cannot be retired under this signature;
    False if the key is not registered yet. For a new key, take the registry's lock (one new key
    at a time) and the current key's row, waiting out every signature made with it."""
    registered = _registered_key(signer)
    if registered is None:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {_SIGNING_KEY_TABLE} IN SHARE ROW EXCLUSIVE MODE")
        registered = _registered_key(signer)  # a concurrent first use may have won
    if registered is None:
        list(SigningKey.objects.select_for_update().filter(valid_until__isnull=True))
        return False
    key_id, valid_until = registered
    if valid_until is not None:
        raise RetiredSigningKeyError(
            f"signing key {signer.name}+{key_id} was retired at {valid_until.isoformat()}; "
            "install the current key (see manage.py rotate_signing_key)"
        )
    return True


def _registered_key(signer: Signer) -> tuple[str, datetime | None] | None:
    rows = SigningKey.objects.select_for_update().filter(public_key=signer.public_key)
    return rows.values_list("key_id", "valid_until").first()


def _register_signing_key(signer: Signer, *, since: datetime) -> None:
    verifier = signer.verifier
    SigningKey.objects.filter(valid_until__isnull=True).update(valid_until=since)
    SigningKey.objects.create(
        name=verifier.name,
        key_id=f"{verifier.key_id:08x}",
        public_key=verifier.public_key,
        vkey=verifier.vkey,
        valid_from=since,
    )


_ENTRY_TABLE = Entry._meta.db_table
_NODE_TABLE = MerkleNode._meta.db_table
_LOG_TABLE = Log._meta.db_table
_SIGNING_KEY_TABLE = SigningKey._meta.db_table
_READ_HEAD = f"SELECT size, head_hash, frontier FROM {_LOG_TABLE} WHERE id = %s"
_UPDATE_HEAD = f"UPDATE {_LOG_TABLE} SET size = %s, head_hash = %s, frontier = %s WHERE id = %s"
_ENTRY_COLUMNS = "log_id, seq, kind, effect_id, body, prev_hash, entry_hash, created_at"
_ROWS_PER_INSERT = 100  # keeps statements far below every backend's placeholder limit
# One round trip for all an append writes: arrays instead of a placeholder per value, nodes in
# completion order (ORDINALITY), so id order is append order (verify_log relies on it).
_WRITE_POSTGRESQL = f"""
WITH appended AS (
    INSERT INTO {_ENTRY_TABLE} ({_ENTRY_COLUMNS})
    SELECT %s, * FROM unnest(
        %s::bigint[], %s::varchar[], %s::varchar[], %b::bytea[], %b::bytea[], %b::bytea[],
        %s::timestamptz[]
    )
    RETURNING id, seq
), nodes AS (
    INSERT INTO {_NODE_TABLE} (log_id, level, "index", hash)
    SELECT %s, level, position, hash
    FROM unnest(%s::smallint[], %s::bigint[], %b::bytea[]) WITH ORDINALITY
        AS node(level, position, hash, n)
    ORDER BY n
), head AS (
    UPDATE {_LOG_TABLE} SET size = %s, head_hash = %b, frontier = %b WHERE id = %s
)
SELECT id, seq FROM appended"""


def _server_bound_cursor() -> Any:
    """A cursor that sends parameters apart from the statement, the marked (%b) ones as raw
    bytes: Django's default cursor spells every byte of every hash into the SQL text as hex.
    Wrapped as Django wraps its own, so query logging and execute wrappers still see it."""
    connection.ensure_connection()
    wrap = connection.make_debug_cursor if connection.queries_logged else connection.make_cursor
    return wrap(cast(Any, psycopg.Cursor(connection.connection)))  # the stubs want a wrapper


def _write(
    *,
    log_id: int,
    entries: Sequence[LedgerEntry],
    nodes: Sequence[tuple[NodeId, bytes]],
    head: Head,
) -> dict[int, int]:
    """Insert the entry and node rows and move the head; the entries' row ids by seq. One
    statement on PostgreSQL; a statement per table elsewhere (SQLite, the embedded default)."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            ids = _insert_entries(cursor, log_id=log_id, entries=entries)
            _insert_nodes(cursor, log_id=log_id, nodes=nodes)
            cursor.execute(_UPDATE_HEAD, [*head, log_id])
        return ids
    with _server_bound_cursor() as cursor:
        cursor.execute(
            _WRITE_POSTGRESQL,
            [
                log_id,
                [e.seq for e in entries],
                [e.kind for e in entries],
                [e.effect_id for e in entries],
                [e.body for e in entries],
                [e.prev_hash for e in entries],
                [e.entry_hash for e in entries],
                [e.created_at for e in entries],
                log_id,
                [level for (level, _), _ in nodes],
                [index for (_, index), _ in nodes],
                [node for _, node in nodes],
                *head,
                log_id,
            ],
        )
        return {seq: pk for pk, seq in cursor.fetchall()}


def _insert_entries(cursor: Any, *, log_id: int, entries: Sequence[LedgerEntry]) -> dict[int, int]:
    """Insert entry rows; return their primary keys by seq."""
    ids: dict[int, int] = {}
    for start in range(0, len(entries), _ROWS_PER_INSERT):
        chunk = entries[start : start + _ROWS_PER_INSERT]
        params: list[Any] = []
        for e in chunk:
            created_at = connection.ops.adapt_datetimefield_value(e.created_at)
            params += [log_id, e.seq, e.kind, e.effect_id, e.body, e.prev_hash, e.entry_hash]
            params.append(created_at)
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(chunk))
        cursor.execute(
            f"INSERT INTO {_ENTRY_TABLE} ({_ENTRY_COLUMNS}) VALUES {values} RETURNING id, seq",
            params,
        )
        ids.update((seq, pk) for pk, seq in cursor.fetchall())
    return ids


def _insert_nodes(cursor: Any, *, log_id: int, nodes: Sequence[tuple[NodeId, bytes]]) -> None:
    # Inserted in completion order, so id order is append order (verify_log relies on it).
    for start in range(0, len(nodes), _ROWS_PER_INSERT):
        chunk = nodes[start : start + _ROWS_PER_INSERT]
        params = [v for (level, index), node in chunk for v in (log_id, level, index, node)]
        values = ", ".join(["(%s, %s, %s, %s)"] * len(chunk))
        cursor.execute(
            f'INSERT INTO {_NODE_TABLE} (log_id, level, "index", hash) VALUES {values}', params
        )


def _entry_row(pk: int, log: Log, entry: LedgerEntry) -> Entry:
    """The row as a read would give it: from_db builds it positionally, at half the cost of
    keyword arguments (one per entry appended)."""
    row = Entry.from_db(
        connection.alias,
        _ROW_FIELDS,
        (
            pk,
            log.pk,
            entry.seq,
            entry.kind,
            entry.effect_id,
            entry.body,
            entry.prev_hash,
            entry.entry_hash,
            entry.created_at,
        ),
    )
    Entry.log.field.set_cached_value(row, log)
    return row


# Entry's fields in the order of its columns, as from_db takes them (and _entry_row gives them).
_ROW_FIELDS = [field.attname for field in Entry._meta.concrete_fields]


def _encode_body(body: Mapping[str, Any] | bytes) -> bytes:
    if isinstance(body, bytes):
        return body
    try:
        return canonical_json(body)
    except CanonicalJSONError as exc:
        raise LedgerInputError(f"entry body has no canonical JSON encoding: {exc}") from exc
