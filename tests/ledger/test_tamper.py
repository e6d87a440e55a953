"""What a database superuser who drops the append-only triggers can and cannot get away with.

The triggers stop every ordinary client from rewriting history. An attacker who drops them can
change entries, but `verify_ledger` names the first tampered seq; and one who also rewrites every
derived value (chain, Merkle nodes, head) to agree with the tampered entries still cannot produce a
consistency proof from a checkpoint signed before the tampering, which an auditor keeps.

Each test runs in one transaction that is rolled back, dropped triggers included."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, models, transaction

from ledger import selectors, services
from ledger.core import merkle
from ledger.core.canonical import canonical_json
from ledger.core.checkpoint import log_verifier, open_checkpoint
from ledger.core.entries import EntryKind
from ledger.core.merkle import ProofError
from ledger.core.note import Signer, Verifier
from ledger.models import Checkpoint, Entry, Log, MerkleNode
from ledger.services import NewEntry
from testkit.insider import APPEND_ONLY_TABLES, cover_tracks, drop_ledger_triggers, execute

SIZE = 40
CHECKPOINT_SIZES = (20, 40)
# A seq no test log reaches, to park a row on while swapping two seqs.
PARKING_SEQ = 10**9


@dataclass(frozen=True)
class SignedLog:
    """A log of SIZE entries and the checkpoint notes an auditor kept as they were signed."""

    log: Log
    verifier: Verifier
    held_notes: dict[int, str]


def append_only_triggers() -> set[tuple[str, str, str]]:
    """(table, trigger, enabled state) of each append-only trigger in the database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgrelid::regclass::text, tgname, tgenabled FROM pg_trigger "
            "WHERE tgname = ANY(%s)",
            [[f"{table}_append_only" for table in APPEND_ONLY_TABLES]],
        )
        return set(cursor.fetchall())


INTACT_TRIGGERS = {(table, f"{table}_append_only", "O") for table in APPEND_ONLY_TABLES}


@pytest.fixture
def signed_log(log: Log, signer: Signer) -> SignedLog:
    """The log, with a checkpoint signed at each of CHECKPOINT_SIZES.

    First checks the triggers are in place (no earlier test's DROP TRIGGER outlived its rollback);
    last, that the untouched log verifies and each kept checkpoint proves consistent with it, so
    any failure a test then sees is the tampering's."""
    assert append_only_triggers() == INTACT_TRIGGERS
    kinds = list(EntryKind)
    notes = {}
    for start, end in itertools.pairwise((0, *CHECKPOINT_SIZES)):
        services.append_entries(
            log=log,
            items=[
                NewEntry(kind=kinds[n % len(kinds)], body={"n": n}, effect_id=f"effect-{n}")
                for n in range(start, end)
            ],
        )
        notes[end] = services.sign_checkpoint(log=log, signer=signer).note
    signed = SignedLog(log=log, verifier=log_verifier(log.origin, signer), held_notes=notes)
    assert verify_ledger(log).startswith(f"OK {log.origin}: {SIZE} entries")
    for size in CHECKPOINT_SIZES:
        prove_held_checkpoint(signed, size)
    return signed


def verify_ledger(log: Log) -> str:
    out = io.StringIO()
    call_command("verify_ledger", log=log.origin, no_progress=True, stdout=out)
    return out.getvalue()


def assert_verify_ledger_fails(log: Log, seq: int, reason: str) -> None:
    with pytest.raises(CommandError) as failure:
        verify_ledger(log)
    assert str(failure.value) == f"FAIL at seq {seq}: {reason}"
    # A failure stops the walk early; its server-side cursors must be closed right then.
    assert open_cursors() == []


def open_cursors() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_cursors")
        return [name for (name,) in cursor.fetchall()]


def prove_held_checkpoint(signed: SignedLog, size: int) -> None:
    """What an auditor does with a checkpoint it kept: ask for a consistency proof from it to
    the log's current tree and check it; raises ProofError when the log cannot give one."""
    held = open_checkpoint(signed.held_notes[size], [signed.verifier], origin=signed.log.origin)
    current = selectors.log_head(log=signed.log).size
    proof = selectors.consistency_proof(log=signed.log, old_size=held.size, new_size=current)
    merkle.verify_consistency(
        old_size=held.size,
        new_size=current,
        old_root=held.root,
        new_root=selectors.root_at(log=signed.log, size=current),
        proof=proof,
    )


# --- The attacker -----------------------------------------------------------------------------


def change_body(log: Log, seq: int) -> None:
    body = canonical_json({"n": seq, "amount_cents": 1})
    execute("UPDATE ledger_entry SET body = %s WHERE log_id = %s AND seq = %s", [body, log.pk, seq])


def delete_row(log: Log, seq: int) -> None:
    execute("DELETE FROM ledger_entry WHERE log_id = %s AND seq = %s", [log.pk, seq])


def swap_pair(log: Log, seq: int) -> None:
    """Exchange the seqs of entries seq and seq + 1, so they are read in the other order."""
    for old, new in ((seq, PARKING_SEQ), (seq + 1, seq), (PARKING_SEQ, seq + 1)):
        execute(
            "UPDATE ledger_entry SET seq = %s WHERE log_id = %s AND seq = %s", [new, log.pk, old]
        )


def truncate_tail(log: Log, seq: int) -> None:
    execute("DELETE FROM ledger_entry WHERE log_id = %s AND seq >= %s", [log.pk, seq])


# --- Without the attacker: the database refuses -----------------------------------------------

Operation = Callable[[Log, type[models.Model], str, object], None]


def raw_update(log: Log, model: type[models.Model], column: str, value: object) -> None:
    execute(f"UPDATE {model._meta.db_table} SET {column} = %s WHERE log_id = %s", [value, log.pk])


def raw_delete(log: Log, model: type[models.Model], column: str, value: object) -> None:
    execute(f"DELETE FROM {model._meta.db_table} WHERE log_id = %s", [log.pk])


def orm_update(log: Log, model: type[models.Model], column: str, value: object) -> None:
    model._default_manager.filter(log=log).update(**{column: value})


def orm_delete(log: Log, model: type[models.Model], column: str, value: object) -> None:
    model._default_manager.filter(log=log).delete()


def orm_save(log: Log, model: type[models.Model], column: str, value: object) -> None:
    row = model._default_manager.filter(log=log).order_by("pk").first()
    assert row is not None
    setattr(row, column, value)
    row.save()


def orm_instance_delete(log: Log, model: type[models.Model], column: str, value: object) -> None:
    row = model._default_manager.filter(log=log).order_by("pk").first()
    assert row is not None
    row.delete()


def ledger_rows(log: Log) -> list[list[tuple[object, ...]]]:
    return [
        [
            tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
            for row in model._default_manager.filter(log=log).order_by("pk").values_list()
        ]
        for model in (Entry, MerkleNode, Checkpoint)
    ]


@pytest.mark.parametrize(
    ("model", "column", "value"),
    [
        (Entry, "body", canonical_json({"n": 0, "amount_cents": 1})),
        (MerkleNode, "hash", bytes(32)),
        (Checkpoint, "note", "forged\n"),
    ],
    ids=["entry", "merkle-node", "checkpoint"],
)
@pytest.mark.parametrize(
    ("operation", "verb"),
    [
        (raw_update, "UPDATE"),
        (raw_delete, "DELETE"),
        (orm_update, "UPDATE"),
        (orm_delete, "DELETE"),
        (orm_save, "UPDATE"),
        (orm_instance_delete, "DELETE"),
    ],
    ids=["raw-update", "raw-delete", "orm-update", "orm-delete", "orm-save", "orm-instance-delete"],
)
def test_database_refuses_to_change_or_delete_ledger_rows(
    signed_log: SignedLog,
    model: type[models.Model],
    column: str,
    value: object,
    operation: Operation,
    verb: str,
) -> None:
    """The trigger, not the application, is what refuses: raw SQL is stopped like the ORM."""
    log = signed_log.log
    before = ledger_rows(log)
    table = model._meta.db_table

    with pytest.raises(DatabaseError) as refusal, transaction.atomic():
        operation(log, model, column, value)

    assert f"ledger rows are append-only: {verb} on {table} refused" in str(refusal.value)
    assert getattr(refusal.value.__cause__, "sqlstate", None) == "23001"  # restrict_violation
    assert ledger_rows(log) == before
    assert verify_ledger(log).startswith(f"OK {log.origin}: {SIZE} entries")


# --- With the attacker ------------------------------------------------------------------------

MISMATCH = (
    "signed checkpoint at size {size} does not match the entries: "
    "an entry below seq {size} was altered, removed or reordered"
)
ENDS_EARLY = "missing: the log ends before seq {seq} but a checkpoint of size {size} was signed"
OLD_ROOT = "consistency proof does not lead to the old root"
SAME_SIZE = "equal sizes but different roots"
TOO_SMALL = "old size {old} is larger than new size {new}"


@dataclass(frozen=True)
class Tamper:
    """One tampering at seq `at`, and exactly how each check reports it.

    naive: what verify_ledger says when only the entries were touched. covered: what it says
    after `cover_tracks`. held: per kept checkpoint size, the ProofError its consistency proof to
    the covered-up tree raises, or None where the checkpoint covers only untouched entries."""

    tamper: Callable[[Log, int], None]
    at: int
    naive: tuple[int, str]
    covered: tuple[int, str]
    held: dict[int, str | None]


TAMPERS = {
    "changed-body-at-7": Tamper(
        change_body,
        7,
        naive=(7, "entry hash does not match the entry's contents"),
        covered=(19, MISMATCH.format(size=20)),
        held={20: OLD_ROOT, 40: SAME_SIZE},
    ),
    "changed-body-at-29": Tamper(
        change_body,
        29,
        naive=(29, "entry hash does not match the entry's contents"),
        covered=(39, MISMATCH.format(size=40)),
        held={20: None, 40: SAME_SIZE},
    ),
    "deleted-row-at-7": Tamper(
        delete_row,
        7,
        naive=(7, "missing: the next stored entry is seq 8"),
        covered=(19, MISMATCH.format(size=20)),
        held={20: OLD_ROOT, 40: TOO_SMALL.format(old=40, new=39)},
    ),
    "deleted-row-at-29": Tamper(
        delete_row,
        29,
        naive=(29, "missing: the next stored entry is seq 30"),
        covered=(39, ENDS_EARLY.format(seq=39, size=40)),
        held={20: None, 40: TOO_SMALL.format(old=40, new=39)},
    ),
    "swapped-pair-at-7": Tamper(
        swap_pair,
        7,
        naive=(7, "prev_hash does not link to the entry before it"),
        covered=(19, MISMATCH.format(size=20)),
        held={20: OLD_ROOT, 40: SAME_SIZE},
    ),
    "swapped-pair-at-29": Tamper(
        swap_pair,
        29,
        naive=(29, "prev_hash does not link to the entry before it"),
        covered=(39, MISMATCH.format(size=40)),
        held={20: None, 40: SAME_SIZE},
    ),
    "truncated-tail-at-7": Tamper(
        truncate_tail,
        7,
        naive=(7, ENDS_EARLY.format(seq=7, size=20)),
        covered=(7, ENDS_EARLY.format(seq=7, size=20)),
        held={20: TOO_SMALL.format(old=20, new=7), 40: TOO_SMALL.format(old=40, new=7)},
    ),
    "truncated-tail-at-29": Tamper(
        truncate_tail,
        29,
        naive=(29, ENDS_EARLY.format(seq=29, size=40)),
        covered=(29, ENDS_EARLY.format(seq=29, size=40)),
        held={20: None, 40: TOO_SMALL.format(old=40, new=29)},
    ),
}

tamper_cases = pytest.mark.parametrize("case", TAMPERS.values(), ids=TAMPERS.keys())


def assert_held_checkpoints(signed: SignedLog, held: dict[int, str | None]) -> None:
    for size, error in held.items():
        if error is None:
            prove_held_checkpoint(signed, size)
        else:
            with pytest.raises(ProofError) as failure:
                prove_held_checkpoint(signed, size)
            assert str(failure.value) == error


@tamper_cases
def test_naive_tamper_fails_verify_ledger_at_the_tampered_seq(
    signed_log: SignedLog, case: Tamper
) -> None:
    """Touching entries alone breaks the chain (or the seq run) right where it was touched."""
    drop_ledger_triggers()
    assert append_only_triggers() == set()

    case.tamper(signed_log.log, case.at)

    assert_verify_ledger_fails(signed_log.log, *case.naive)


@tamper_cases
def test_covered_tracks_still_fail_consistency_with_held_checkpoints(
    signed_log: SignedLog, case: Tamper
) -> None:
    """A self-consistent rewrite is still not an extension of what was signed before it.

    The stored checkpoints name it; with those deleted too the log verifies on its own, and only
    the checkpoint an auditor kept tells: its consistency proof fails."""
    log = signed_log.log
    drop_ledger_triggers()
    case.tamper(log, case.at)
    cover_tracks(log)

    assert_verify_ledger_fails(log, *case.covered)
    assert_held_checkpoints(signed_log, case.held)

    Checkpoint.objects.filter(log=log).delete()
    size = selectors.log_head(log=log).size
    assert verify_ledger(log).startswith(f"OK {log.origin}: {size} entries")
    assert_held_checkpoints(signed_log, case.held)


@pytest.mark.parametrize(
    ("cut", "failure", "held"),
    [
        (7, (19, MISMATCH.format(size=20)), {20: OLD_ROOT, 40: OLD_ROOT}),
        (29, (39, MISMATCH.format(size=40)), {20: None, 40: OLD_ROOT}),
    ],
    ids=["cut-at-7", "cut-at-29"],
)
def test_truncated_log_regrown_past_held_checkpoints_still_fails_their_proofs(
    signed_log: SignedLog, cut: int, failure: tuple[int, str], held: dict[int, str | None]
) -> None:
    """Growing back past a kept checkpoint's size buys a proof, but never one that verifies."""
    log = signed_log.log
    drop_ledger_triggers()
    truncate_tail(log, cut)
    cover_tracks(log)
    for n in range(cut, SIZE + 5):
        services.append_entry(log=log, kind="OBSERVED", body={"n": n, "forged": True})

    assert selectors.log_head(log=log).size == SIZE + 5
    assert_verify_ledger_fails(log, *failure)
    assert_held_checkpoints(signed_log, held)


def test_failed_verify_ledger_leaves_no_cursor_open(signed_log: SignedLog) -> None:
    """A failed verification must not leave cursors behind on the caller's connection."""
    drop_ledger_triggers()
    delete_row(signed_log.log, 7)
    with pytest.raises(CommandError):
        verify_ledger(signed_log.log)
    assert open_cursors() == []


def test_append_only_triggers_are_back_after_tampering_tests(db: None) -> None:
    """Dropping the triggers was DDL inside each test's transaction, so it was rolled back too."""
    assert append_only_triggers() == INTACT_TRIGGERS
