"""Issue 16, items 1 and 2: an insider rewriting or rolling back history, as the PostgreSQL
superuser the tests connect as, on the test database.

Each attack is made as thoroughly as a superuser can: triggers dropped, every derived value
(chain, Merkle nodes, log head) recomputed to agree with the forged entries, and where it helps
the attacker the stored checkpoints deleted too. Then either sign_checkpoint refuses to sign the
forged tree (it checks the stored nodes against the head row and proves the tree consistent
with the latest stored checkpoint, and with the head the notary remembers signing, beside its
key, outside the database), or, where the attacker removed even that memory,
`verify_ledger --checkpoint FILE` with a checkpoint an auditor kept outside the database fails
naming the rollback or the fork. Each test runs in one transaction that is rolled back, dropped
triggers included."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from ledger import services
from ledger.core.canonical import canonical_json
from ledger.core.merkle import Frontier
from ledger.models import Checkpoint, Log
from ledger.selectors import TreeHeadRefused
from ledger.services import NewEntry
from testkit.insider import cover_tracks, drop_ledger_triggers, execute

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Held:
    """A log of 40 entries signed at sizes 20 and 40, and those two notes kept in files."""

    log: Log
    at_20: Path
    at_40: Path


def grow(log: Log, start: int, end: int, *, tag: str = "honest") -> None:
    services.append_entries(
        log=log,
        items=[
            NewEntry(kind="OBSERVED", body={"n": n, "tag": tag}, effect_id=f"e-{n}")
            for n in range(start, end)
        ],
    )


@pytest.fixture
def held(log: Log, signer: object, tmp_path: Path) -> Held:
    files = {}
    for start, end in ((0, 20), (20, 40)):
        grow(log, start, end)
        note = services.sign_checkpoint(log=log, signer=signer).note  # type: ignore[arg-type]
        files[end] = tmp_path / f"checkpoint-{end}.txt"
        files[end].write_text(note, encoding="utf-8")
    made = Held(log=log, at_20=files[20], at_40=files[40])
    assert "2 held checkpoints" in verify_ledger(log, made.at_20, made.at_40)
    return made


def verify_ledger(log: Log, *held: Path) -> str:
    out = io.StringIO()
    call_command(
        "verify_ledger", log=log.origin, checkpoint=list(held), no_progress=True, stdout=out
    )
    return out.getvalue()


def verify_ledger_failure(log: Log, *held: Path) -> str:
    with pytest.raises(CommandError) as failure:
        verify_ledger(log, *held)
    return str(failure.value)


# --- The attacker -----------------------------------------------------------------------------


def rewrite_frontier(log: Log) -> None:
    """Swap the head's frontier for another tree's of the same size (triggers dropped)."""
    log.refresh_from_db()
    other = Frontier()
    for n in range(log.size):
        other.append(bytes([n]) * 32)
    execute("UPDATE ledger_log SET frontier = %s WHERE id = %s", [other.to_bytes(), log.pk])


def cut(log: Log, *, keep: int) -> None:
    """Remove the entries from seq `keep` on and recompute nodes and head for what is left."""
    execute("DELETE FROM ledger_entry WHERE log_id = %s AND seq >= %s", [log.pk, keep])
    cover_tracks(log)
    log.refresh_from_db()


def forget_checkpoints(log: Log, *, above: int) -> None:
    execute("DELETE FROM ledger_checkpoint WHERE log_id = %s AND size > %s", [log.pk, above])


def sign(log: Log, signer: object) -> Checkpoint:
    log.refresh_from_db()
    return services.sign_checkpoint(log=log, signer=signer)  # type: ignore[arg-type]


def assert_signing_refused(
    log: Log, signer: object, caplog: pytest.LogCaptureFixture, reason: str
) -> None:
    before = Checkpoint.objects.filter(log=log).count()
    with (
        caplog.at_level(logging.CRITICAL, logger="ledger.alerts"),
        pytest.raises(TreeHeadRefused, match=reason),
    ):
        sign(log, signer)
    assert Checkpoint.objects.filter(log=log).count() == before  # nothing signed
    [alert] = [r for r in caplog.records if r.name == "ledger.alerts"]
    assert alert.levelno == logging.CRITICAL
    assert "checkpoint signing refused" in alert.getMessage()
    assert reason.split(":")[0] in alert.getMessage()


# --- The log head only moves forward ----------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_log SET frontier = decode(repeat('00', 96), 'hex') WHERE id = %s",
        "UPDATE ledger_log SET head_hash = decode(repeat('00', 32), 'hex') WHERE id = %s",
        "UPDATE ledger_log SET size = 10 WHERE id = %s",
        "UPDATE ledger_log SET size = size + 1 WHERE id = %s",
        "UPDATE ledger_log SET origin = origin || 'x' WHERE id = %s",
        "DELETE FROM ledger_log WHERE id = %s",
    ],
    ids=["frontier", "head-hash", "smaller-size", "size-naming-no-entry", "origin", "delete"],
)
def test_the_database_refuses_any_head_change_but_an_append(held: Held, statement: str) -> None:
    """Item 2: a plain UPDATE of ledger_log.frontier (or any change but an append's) is refused
    by the trigger on the head row, for every client."""
    log = held.log
    log.refresh_from_db()
    before = (log.size, bytes(log.head_hash), bytes(log.frontier), log.origin)
    with (
        pytest.raises(DatabaseError, match="ledger log heads only move forward"),
        transaction.atomic(),
    ):
        execute(statement, [log.pk])
    log.refresh_from_db()
    assert (log.size, bytes(log.head_hash), bytes(log.frontier), log.origin) == before
    grow(log, 40, 41)  # an append still moves it forward
    assert Log.objects.get(pk=log.pk).size == 41


def test_the_database_refuses_truncate_of_the_log_heads(held: Held) -> None:
    with (
        pytest.raises(DatabaseError, match="append-only: TRUNCATE on ledger_log refused"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET LOCAL ledger.allow_truncate = 'off'")
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("TRUNCATE ledger_log CASCADE")
    assert Log.objects.filter(pk=held.log.pk).exists()


# --- Signing checks before it signs -----------------------------------------------------------


def test_a_rewritten_frontier_is_never_signed(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 2 past the trigger: the head's frontier is swapped for another tree's of the same
    size. Signing folds the root from the stored nodes instead, sees they differ, and refuses."""
    log = held.log
    grow(log, 40, 45)
    drop_ledger_triggers()
    rewrite_frontier(log)
    assert_signing_refused(
        log, signer, caplog, "the log head's frontier does not give the root of the stored nodes"
    )


def test_a_head_naming_no_entry_is_never_signed(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture
) -> None:
    log = held.log
    grow(log, 40, 41)
    drop_ledger_triggers()
    execute("UPDATE ledger_log SET head_hash = %s WHERE id = %s", [bytes(32), log.pk])
    assert_signing_refused(log, signer, caplog, r"the log head does not name the last entry")


def test_a_rollback_below_a_stored_checkpoint_is_never_signed(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 1, cut the last entries and reset the head: the checkpoint of size 40 is still
    stored, so signing refuses a smaller tree; verify_ledger fails at the cut too."""
    drop_ledger_triggers()
    cut(held.log, keep=30)
    assert_signing_refused(held.log, signer, caplog, "the log has 30 entries but a checkpoint")
    assert "missing: the log ends before seq 30" in verify_ledger_failure(held.log)


def test_a_rollback_with_its_checkpoints_removed_is_never_signed(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture
) -> None:
    """The thorough rollback: checkpoints above the cut are deleted too, so the database agrees
    with itself (the tree of 30 extends the checkpoint of size 20 left). The notary's memory of
    what it signed, beside its key, still holds 40: signing refuses. An auditor's kept
    checkpoint of size 40 exposes the rollback too."""
    log = held.log
    drop_ledger_triggers()
    cut(log, keep=30)
    forget_checkpoints(log, above=20)
    assert_signing_refused(
        log,
        signer,
        caplog,
        "the log has 30 entries but the notary's memory of what it signed holds a signed tree "
        "of size 40: the log was rolled back",
    )
    assert verify_ledger(log, held.at_20).startswith("held checkpoint")
    failure = verify_ledger_failure(log, held.at_20, held.at_40)
    assert failure.startswith(f"FAIL: rollback: held checkpoint {held.at_40} (size 40, root ")
    assert "was signed, but the log has only 30 entries" in failure


def test_a_damaged_memory_of_what_was_signed_stops_signing(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture, signed_heads_file: Path
) -> None:
    """The memory beside the key overwritten with something else: nothing is signed until an
    operator looks, rather than signing as if nothing had been signed before."""
    signed_heads_file.write_text("{}", encoding="utf-8")
    grow(held.log, 40, 41)
    assert_signing_refused(held.log, signer, caplog, "is not the notary's signed heads")


def test_cut_and_regrow_is_never_signed_over_a_stored_checkpoint(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 1, cut and regrow to the same size with other entries: signing would return (or
    sign) a second root for size 40; the stored checkpoint's root differs and it refuses."""
    log = held.log
    drop_ledger_triggers()
    cut(log, keep=30)
    grow(log, 30, 40, tag="forged")
    assert_signing_refused(
        log, signer, caplog, "the tree of size 40 is not consistent with the checkpoint"
    )


def test_cut_and_regrow_with_its_checkpoints_removed_is_never_signed(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture, signed_heads_file: Path
) -> None:
    """The split view: with the stored checkpoint gone, the database holds a second tree of size
    40 that extends all it still has; the notary's memory holds the first, and signing refuses.
    Only with that memory deleted too (the insider has the key's host as well) does the key sign
    the forged tree; verify_ledger passes on the database alone, and fails with the checkpoint
    kept, naming both roots."""
    log = held.log
    drop_ledger_triggers()
    cut(log, keep=30)
    forget_checkpoints(log, above=20)
    grow(log, 30, 40, tag="forged")
    assert_signing_refused(
        log,
        signer,
        caplog,
        "the notary's memory of what it signed holds a signed tree of size 40 with another "
        "root: the log was rewritten",
    )
    signed_heads_file.unlink()
    forged = sign(log, signer)
    assert forged.size == 40 and forged.note != held.at_40.read_text(encoding="utf-8")
    assert verify_ledger(log).startswith(f"OK {log.origin}: 40 entries")
    failure = verify_ledger_failure(log, held.at_40)
    assert failure.startswith(f"FAIL: fork: held checkpoint {held.at_40} (size 40, root ")
    assert "but the log's tree of size 40 has root " in failure


def test_a_changed_old_entry_with_every_hash_recomputed_is_never_signed(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 1, change entry 7 and recompute every hash after it (chain, nodes, head): the new
    tree is not consistent with the latest stored checkpoint, and signing refuses."""
    log = held.log
    grow(log, 40, 44)
    drop_ledger_triggers()
    body = canonical_json({"n": 7, "tag": "forged", "amount_cents": 1})
    execute("UPDATE ledger_entry SET body = %s WHERE log_id = %s AND seq = 7", [body, log.pk])
    cover_tracks(log)
    assert_signing_refused(
        log, signer, caplog, "the tree of size 44 is not consistent with the checkpoint signed"
    )


def test_a_changed_old_entry_with_every_checkpoint_removed_is_never_signed(
    held: Held, signer: object, caplog: pytest.LogCaptureFixture
) -> None:
    log = held.log
    drop_ledger_triggers()
    body = canonical_json({"n": 7, "tag": "forged", "amount_cents": 1})
    execute("UPDATE ledger_entry SET body = %s WHERE log_id = %s AND seq = 7", [body, log.pk])
    cover_tracks(log)
    forget_checkpoints(log, above=-1)
    assert_signing_refused(
        log, signer, caplog, "the notary's memory of what it signed holds a signed tree of size 40"
    )
    assert verify_ledger(log).startswith(f"OK {log.origin}: 40 entries")
    for kept in (held.at_20, held.at_40):
        failure = verify_ledger_failure(log, kept)
        assert failure.startswith(f"FAIL: fork: held checkpoint {kept}")
        assert "the entries below seq" in failure


def test_truncate_with_allow_truncate_fails_the_held_checkpoint(held: Held) -> None:
    """Item 1, TRUNCATE with ledger.allow_truncate (the test settings' own session allows it),
    the head reset to empty past its dropped trigger: an empty log, OK on its own."""
    log = held.log
    drop_ledger_triggers()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL ledger.allow_truncate = 'on'")
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(
            "TRUNCATE ledger_entry, ledger_merklenode, ledger_checkpoint, ledger_cosignature"
        )
    cover_tracks(log)
    assert verify_ledger(log).startswith(f"OK {log.origin}: 0 entries")
    failure = verify_ledger_failure(log, held.at_20)
    assert failure.startswith(f"FAIL: rollback: held checkpoint {held.at_20} (size 20")
    assert "the log has only 0 entries" in failure


def test_a_held_checkpoint_of_another_log_or_key_is_refused(
    held: Held, make_log: object, tmp_path: Path
) -> None:
    forged = tmp_path / "forged.txt"
    forged.write_text(
        held.at_20.read_text(encoding="utf-8").replace("\n20\n", "\n21\n", 1), encoding="utf-8"
    )
    failure = verify_ledger_failure(held.log, forged)
    assert failure.startswith(f"held checkpoint {forged}: checkpoint signature")
    missing = tmp_path / "absent.txt"
    assert verify_ledger_failure(held.log, missing).startswith(f"held checkpoint {missing}: ")


def test_the_beat_task_signs_every_other_log_when_one_is_refused(
    held: Held, make_log: Any, signing_key_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One rewritten log is alerted and left unsigned; the run still signs every other log."""
    from ledger.tasks import sign_due_checkpoints

    honest = make_log()
    grow(honest, 0, 3)
    grow(held.log, 40, 45)
    drop_ledger_triggers()
    rewrite_frontier(held.log)
    with caplog.at_level(logging.CRITICAL, logger="ledger.alerts"):
        signed = sign_due_checkpoints()
    assert [Checkpoint.objects.get(pk=pk).log_id for pk in signed] == [honest.pk]
    assert not Checkpoint.objects.filter(log=held.log, size=45).exists()
    assert any("checkpoint signing refused" in r.getMessage() for r in caplog.records)


def test_the_sign_checkpoint_command_refuses_in_one_line(held: Held) -> None:
    """An operator signing by hand gets the refusal as a command error, not a traceback."""
    log = held.log
    grow(log, 40, 45)
    drop_ledger_triggers()
    rewrite_frontier(log)
    with pytest.raises(CommandError, match=r"nothing signed: .*run verify_ledger"):
        call_command("sign_checkpoint", log=log.origin, stdout=io.StringIO())
    assert not Checkpoint.objects.filter(log=log, size=45).exists()
