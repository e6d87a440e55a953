"""The ledger's tables. Entries, Merkle nodes and checkpoints are append-only: database triggers
(migration 0002) refuse UPDATE and DELETE, whatever the ORM or a stray SQL session tries, and so
do they for witness cosignatures (0006). The signing-key registry is append-only too, but for
closing the current key's period (0004)."""

from __future__ import annotations

from functools import cached_property

from django.db import models
from django.db.models.lookups import IsNull

from ledger.core.cosignature import CosignatureError
from ledger.core.entries import MAX_EFFECT_ID_LENGTH, EntryKind
from ledger.core.entries import Entry as LedgerEntry
from ledger.keys import configured_witness_keys

ORIGIN_MAX_LENGTH = 255


def blob(value: bytes | memoryview | str) -> bytes:
    """A binary column's value as bytes. SQLite stores whatever a writer hands it; text where
    bytes belong is for verify to flag."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


class Log(models.Model):
    """One append-only log (one per tenant). Its row is the lock appenders queue on, and it
    carries the head — size, last hash, Merkle frontier — so an append reads nothing else."""

    origin = models.CharField(max_length=ORIGIN_MAX_LENGTH, unique=True)
    size = models.BigIntegerField(default=0)
    head_hash = models.BinaryField(max_length=32)
    frontier = models.BinaryField(default=b"")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(size__gte=0), name="log_size_gte_0")
        ]

    def __str__(self) -> str:
        return self.origin


class Entry(models.Model):
    log = models.ForeignKey(Log, on_delete=models.PROTECT, related_name="entries")
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=32, choices=[(k.value, k.value) for k in EntryKind])
    effect_id = models.CharField(max_length=MAX_EFFECT_ID_LENGTH, blank=True, default="")
    body = models.BinaryField()
    prev_hash = models.BinaryField(max_length=32)
    entry_hash = models.BinaryField(max_length=32)
    created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "entries"
        constraints = [
            models.UniqueConstraint(fields=["log", "seq"], name="entry_unique_log_seq"),
            models.CheckConstraint(condition=models.Q(seq__gte=0), name="entry_seq_gte_0"),
        ]
        indexes = [models.Index(fields=["log", "effect_id", "seq"], name="entry_effect_idx")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.seq}"

    def as_ledger_entry(self) -> LedgerEntry:
        return LedgerEntry(
            seq=self.seq,
            kind=self.kind,
            effect_id=self.effect_id,
            body=blob(self.body),
            created_at=self.created_at,
            prev_hash=blob(self.prev_hash),
            entry_hash=blob(self.entry_hash),
        )


class MerkleNode(models.Model):
    """A perfect internal subtree root (level >= 1); level 0 is Entry.entry_hash."""

    log = models.ForeignKey(Log, on_delete=models.PROTECT, related_name="nodes")
    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hash = models.BinaryField(max_length=32)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["log", "level", "index"], name="node_unique_position"),
            models.CheckConstraint(condition=models.Q(level__gte=1), name="node_level_gte_1"),
        ]

    def __str__(self) -> str:
        return f"node ({self.level}, {self.index})"


class Checkpoint(models.Model):
    log = models.ForeignKey(Log, on_delete=models.PROTECT, related_name="checkpoints")
    size = models.BigIntegerField()
    root = models.BinaryField(max_length=32)
    note = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["log", "size"], name="checkpoint_unique_size"),
        ]

    def __str__(self) -> str:
        return f"{self.log.origin} @ {self.size}"

    @cached_property
    def verified_cosignatures(self) -> list[Cosignature]:
        """The stored cosignatures that verify over this checkpoint under the key of the
        configured witness they name, the newest of each witness: what a quorum counts and a
        note publishes. A row written past the witnessing code (a line copied from another
        checkpoint, a row inserted by hand) or by a witness no longer configured counts for
        nothing."""
        keys = {(w.name, f"{w.key_id:08x}"): w for w in configured_witness_keys()}
        body = self.note[: self.note.rfind("\n\n") + 1]
        verified: dict[tuple[str, str], Cosignature] = {}
        # Sorted here, not by the query, so a prefetch of the rows (the admin's) serves it.
        rows = sorted(self.cosignatures.all(), key=lambda r: (r.witness, r.key_id, -r.timestamp))
        for row in rows:
            witness = keys.get((row.witness, row.key_id))
            if witness is None or (row.witness, row.key_id) in verified:
                continue
            try:
                timestamp = witness.timestamp_of(row.line, body)
            except CosignatureError:
                timestamp = None
            if timestamp is not None and timestamp == row.timestamp:
                verified[row.witness, row.key_id] = row
        return list(verified.values())

    @cached_property
    def published_note(self) -> str:
        """The signed note with its verified cosignatures appended, as published."""
        return self.note + "".join(row.line for row in self.verified_cosignatures)


class Cosignature(models.Model):
    """A witness's cosignature/v1 of a checkpoint (C2SP tlog-cosignature): stored only once it
    verifies under the witness's configured key, and append-only like the checkpoint. A witness
    cosigns the latest checkpoint again when asked (a log that has not grown); the newest of its
    cosignatures is the one published, so verifiers' freshness bounds hold for an idle log."""

    checkpoint = models.ForeignKey(
        Checkpoint, on_delete=models.PROTECT, related_name="cosignatures"
    )
    witness = models.TextField()  # the witness's key name
    key_id = models.CharField(max_length=8)  # its cosignature/v1 key id, hex
    line = models.TextField()  # the signature line as the published note carries it
    timestamp = models.BigIntegerField()  # when the witness cosigned, by its clock
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["checkpoint", "witness", "key_id", "timestamp"],
                name="cosignature_once_per_witness_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.checkpoint} cosigned by {self.witness}"


class SigningKey(models.Model):
    """The public half of a key that signed checkpoints, and when it was the notary's key.

    sign_checkpoint fills this from use: a key is registered with the first checkpoint it signs,
    which also closes the period of the key before it, and a key whose period is closed never
    signs again. Triggers (migration 0004) refuse deleting a row or changing one, except closing
    the current key's period."""

    name = models.TextField()
    key_id = models.CharField(max_length=8)  # the signed-note key hash under `name`, hex
    public_key = models.BinaryField(max_length=32, unique=True)
    vkey = models.TextField()
    valid_from = models.DateTimeField()  # when it signed its first checkpoint
    valid_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                IsNull(models.F("valid_until"), True),
                condition=models.Q(valid_until__isnull=True),
                name="signingkey_one_current",
            ),
            models.CheckConstraint(
                condition=models.Q(valid_until__isnull=True)
                | models.Q(valid_until__gte=models.F("valid_from")),
                name="signingkey_period_ordered",
            ),
        ]

    def __str__(self) -> str:
        return self.vkey
