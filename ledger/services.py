"""Writes to the ledger: appending entries and signing checkpoints.

Appends to one log are serialized on its Log row (SELECT ... FOR UPDATE), which is what makes seq
gapless and the chain and tree single-file under any number of writer processes. The lock lasts
until the caller's transaction commits, so a caller that records a state change and its entry in
one transaction also orders them in the log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ledger.core.canonical import CanonicalJSONError, canonical_json
from ledger.core.checkpoint import Checkpoint as CheckpointText
from ledger.core.entries import EntryError, check_entry_fields, genesis_hash, seal_entry
from ledger.core.merkle import Frontier
from ledger.core.note import Signer, is_valid_key_name
from ledger.models import ORIGIN_MAX_LENGTH, Checkpoint, Entry, Log, MerkleNode


class LedgerInputError(ValueError):
    """The caller asked for something the ledger refuses; nothing was written."""


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


def append_entries(*, log: Log, items: Sequence[NewEntry]) -> list[Entry]:
    """Append entries in order, all in one transaction; return them with their seqs."""
    prepared = [(_encode_body(item.body), item) for item in items]
    for body, item in prepared:
        try:
            check_entry_fields(kind=item.kind, effect_id=item.effect_id, body=body)
        except EntryError as exc:
            raise LedgerInputError(str(exc)) from exc
    with transaction.atomic():
        locked = Log.objects.select_for_update().get(pk=log.pk)
        frontier = Frontier.from_bytes(locked.size, bytes(locked.frontier))
        prev_hash = bytes(locked.head_hash)
        now = timezone.now()
        entries: list[Entry] = []
        nodes: list[MerkleNode] = []
        for body, item in prepared:
            sealed = seal_entry(
                seq=frontier.size,
                kind=item.kind,
                effect_id=item.effect_id,
                body=body,
                created_at=now,
                prev_hash=prev_hash,
            )
            entries.append(
                Entry(
                    log=locked,
                    seq=sealed.seq,
                    kind=sealed.kind,
                    effect_id=sealed.effect_id,
                    body=sealed.body,
                    prev_hash=sealed.prev_hash,
                    entry_hash=sealed.entry_hash,
                    created_at=sealed.created_at,
                )
            )
            nodes.extend(
                MerkleNode(log=locked, level=level, index=index, hash=node)
                for (level, index), node in frontier.append(sealed.entry_hash)
            )
            prev_hash = sealed.entry_hash
        Entry.objects.bulk_create(entries)
        if nodes:
            MerkleNode.objects.bulk_create(nodes)
        Log.objects.filter(pk=locked.pk).update(
            size=frontier.size, head_hash=prev_hash, frontier=frontier.to_bytes()
        )
    log.size, log.head_hash, log.frontier = frontier.size, prev_hash, frontier.to_bytes()
    return entries


def sign_checkpoint(*, log: Log, signer: Signer) -> Checkpoint:
    """Sign the log's current tree head; the same size signed twice returns the first checkpoint."""
    with transaction.atomic():
        # The row lock gives a size and frontier no appender is halfway through.
        locked = Log.objects.select_for_update().get(pk=log.pk)
        existing = Checkpoint.objects.filter(log=locked, size=locked.size).first()
        if existing is not None:
            return existing
        root = Frontier.from_bytes(locked.size, bytes(locked.frontier)).root()
        text = CheckpointText(origin=locked.origin, size=locked.size, root=root)
        return Checkpoint.objects.create(
            log=locked, size=locked.size, root=root, note=text.sign(signer)
        )


def _encode_body(body: Mapping[str, Any] | bytes) -> bytes:
    if isinstance(body, bytes):
        return body
    try:
        return canonical_json(body)
    except CanonicalJSONError as exc:
        raise LedgerInputError(f"entry body has no canonical JSON encoding: {exc}") from exc
