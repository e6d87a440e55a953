"""The notary sends every checkpoint it signs to its witnesses (real `python -m witness`
processes) and publishes it with their cosignatures, which the spec-text verifier of
testkit.witness_process checks; a log that requires k cosignatures publishes nothing less."""

from __future__ import annotations

import hashlib
import io
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import LazySettings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, transaction

from ledger import selectors, services, tasks
from ledger.core.checkpoint import Checkpoint as CheckpointText
from ledger.core.checkpoint import log_verifier, open_checkpoint
from ledger.core.cosignature import CosignerKey, parse_cosigner_vkey
from ledger.core.note import Signer
from ledger.models import Checkpoint, Cosignature, Log
from ledger.selectors import TreeHeadRefused
from testkit import insider
from testkit.inbox import wait_for
from testkit.witness_process import WitnessSet, spec_cosigned_by

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def witnesses(tmp_path: Path, settings: LazySettings, signer: Signer) -> Iterator[WitnessSet]:
    started = WitnessSet(
        tmp_path, settings, family=f"test.interlock.example={signer.verifier.vkey}"
    )
    yield started
    started.stop_all()


def grow_and_sign(log: Log, signer: Signer, count: int) -> Checkpoint:
    for n in range(count):
        services.append_entry(log=log, kind="PROPOSED", body={"n": n})
    return services.sign_checkpoint(log=log, signer=signer)  # witnessed after its commit


def body_of(note: str) -> str:
    return note[: note.rfind("\n\n") + 1]


def test_every_signed_checkpoint_is_cosigned_by_each_witness_and_published_with_them(
    log: Log, signer: Signer, witnesses: WitnessSet
) -> None:
    first, second = witnesses.start("w1"), witnesses.start("w2")
    for count in (3, 4, 9):
        checkpoint = grow_and_sign(log, signer, count)
        published = selectors.published_checkpoint(log=log)
        assert published is not None and published.pk == checkpoint.pk
        note = published.published_note
        assert note.startswith(checkpoint.note)  # the notary's signature, then cosignatures
        for witness in (first, second):
            assert spec_cosigned_by(note, witness.vkey) is not None
            assert body_of(witness.held(log.origin).text) == body_of(checkpoint.note)
        opened = open_checkpoint(note, [log_verifier(log.origin, signer)], origin=log.origin)
        assert opened.size == log.size
    assert Cosignature.objects.filter(checkpoint__log=log).count() == 6


def test_a_quorum_of_two_publishes_only_what_two_witnesses_cosigned(
    log: Log, signer: Signer, witnesses: WitnessSet, settings: LazySettings
) -> None:
    witnesses.start("w1")
    second = witnesses.start("w2")
    settings.LEDGER_COSIGNATURE_QUORUM = 2
    both = grow_and_sign(log, signer, 2)
    witnesses.stop("w2")
    one = grow_and_sign(log, signer, 2)  # w2 is down: cosigned by w1 only
    assert one.cosignatures.count() == 1
    assert selectors.published_checkpoint(log=Log.objects.get(pk=log.pk)) == both

    # Back up, w2 catches up on the next beat, from the size it cosigned (2) to 4.
    witnesses.start("w2")
    assert tasks.witness_latest_checkpoints()[log.origin]["w2.witness.example"] == "cosigned"
    published = selectors.published_checkpoint(log=Log.objects.get(pk=log.pk))
    assert published == one
    assert spec_cosigned_by(published.published_note, second.vkey) is not None
    assert tasks.witness_latest_checkpoints()[log.origin] == {
        "w1.witness.example": "already",  # cosigned within LEDGER_COSIGNATURE_REFRESH_SECONDS
        "w2.witness.example": "already",
    }


def test_an_idle_logs_checkpoint_is_cosigned_again_once_its_cosignatures_age(
    log: Log, signer: Signer, witnesses: WitnessSet, settings: LazySettings
) -> None:
    """The log does not grow: the beat's task asks the witness again once its cosignature is
    LEDGER_COSIGNATURE_REFRESH_SECONDS old, and the published note carries only the newer."""
    witness = witnesses.start("w1")
    settings.LEDGER_COSIGNATURE_QUORUM = 1
    checkpoint = grow_and_sign(log, signer, 3)
    first = spec_cosigned_by(checkpoint.published_note, witness.vkey)
    assert first is not None
    assert tasks.witness_latest_checkpoints()[log.origin] == {"w1.witness.example": "already"}
    settings.LEDGER_COSIGNATURE_REFRESH_SECONDS = 1
    wait_for(lambda: time.time() >= first + 2)  # the witness's clock counts whole seconds
    assert tasks.witness_latest_checkpoints()[log.origin] == {"w1.witness.example": "cosigned"}
    published = selectors.published_checkpoint(log=Log.objects.get(pk=log.pk))
    assert published == checkpoint
    again = spec_cosigned_by(published.published_note, witness.vkey)
    assert again is not None and again > first
    assert published.published_note.count("\u2014 w1.witness.example ") == 1
    assert checkpoint.cosignatures.count() == 2  # both kept, append-only


def test_a_witness_that_lost_its_state_is_brought_forward_from_the_size_it_names(
    log: Log, signer: Signer, witnesses: WitnessSet
) -> None:
    witnesses.start("w1")
    grow_and_sign(log, signer, 3)
    witness = witnesses.start("w1", fresh_state=True)  # holds nothing now: answers 409 "0"
    checkpoint = grow_and_sign(log, signer, 2)
    assert spec_cosigned_by(checkpoint.published_note, witness.vkey) is not None
    assert body_of(witness.held(log.origin).text) == body_of(checkpoint.note)


def test_a_forged_tree_is_refused_by_the_witness_alerted_and_never_published(
    log: Log,
    signer: Signer,
    witnesses: WitnessSet,
    caplog: pytest.LogCaptureFixture,
    settings: LazySettings,
) -> None:
    """The notary's key signs a tree of 7 that does not extend the 3 the witness cosigned (an
    insider with the key and the database): the witness refuses it with 422, the notary logs a
    critical alert, and the published checkpoint stays the witnessed one."""
    witnesses.start("w1")
    settings.LEDGER_COSIGNATURE_QUORUM = 1
    honest = grow_and_sign(log, signer, 3)
    for n in range(4):
        services.append_entry(log=log, kind="PROPOSED", body={"n": n})
    forged_root = hashlib.sha256(b"another history").digest()
    forged = Checkpoint.objects.create(
        log=log,
        size=7,
        root=forged_root,
        note=CheckpointText(log.origin, 7, forged_root).sign(signer),
    )
    with caplog.at_level(logging.CRITICAL, logger="ledger.alerts"):
        assert tasks.witness_checkpoint(forged.pk) == {"w1.witness.example": "refused"}
    assert "witness w1.witness.example refused the checkpoint of size 7 (422)" in caplog.text
    assert "consistency proof from size 3 does not verify" in caplog.text
    assert forged.cosignatures.count() == 0
    assert selectors.published_checkpoint(log=Log.objects.get(pk=log.pk)) == honest


def test_a_database_restored_from_an_old_backup_is_never_signed(
    log: Log,
    signer: Signer,
    witnesses: WitnessSet,
    caplog: pytest.LogCaptureFixture,
    signed_heads_file: Path,
) -> None:
    """The witness cosigned size 5; the database is put back to a backup at size 3, which grows
    to 4. The notary's memory of what it signed holds 5: signing refuses, alerted. With that
    memory lost too, the witness's latest checkpoint, which the notary asks for before signing,
    holds 5: signing refuses again, naming the witness. Nothing of the restored history is
    signed."""
    witnesses.start("w1")
    grow_and_sign(log, signer, 3)
    backup = insider.back_up(log)
    assert grow_and_sign(log, signer, 2).cosignatures.count() == 1
    insider.restore(backup)
    restored = Log.objects.get(pk=log.pk)
    services.append_entry(log=restored, kind="PROPOSED", body={"n": "restored"})
    restored.refresh_from_db()
    rolled_back = "holds a signed tree of size 5: the log was rolled back"
    remembered = f"the notary's memory of what it signed {rolled_back}"
    with (
        caplog.at_level(logging.CRITICAL, logger="ledger.alerts"),
        pytest.raises(TreeHeadRefused, match=remembered),
    ):
        services.sign_checkpoint(log=restored, signer=signer)
    assert "checkpoint signing refused" in caplog.text
    signed_heads_file.unlink()
    with pytest.raises(TreeHeadRefused, match=f"witness w1.witness.example {rolled_back}"):
        services.sign_checkpoint(log=restored, signer=signer)
    assert list(Checkpoint.objects.filter(log=log).values_list("size", flat=True)) == [3]


def test_the_quorum_is_configuration_no_database_statement_lowers(
    log: Log, signer: Signer, witnesses: WitnessSet, settings: LazySettings
) -> None:
    """LEDGER_COSIGNATURE_QUORUM=1 and the witness down: the checkpoint it never cosigned is not
    published. The DBA's statement that once lowered a log's requirement to publish it (an
    UPDATE of ledger_log.required_cosignatures to 0) finds no such column: the published
    checkpoint stays the witnessed one."""
    witnesses.start("w1")
    settings.LEDGER_COSIGNATURE_QUORUM = 1
    honest = grow_and_sign(log, signer, 2)
    witnesses.stop("w1")
    assert grow_and_sign(log, signer, 2).size == 4
    with pytest.raises(DatabaseError, match="required_cosignatures"), transaction.atomic():
        insider.execute("UPDATE ledger_log SET required_cosignatures = 0 WHERE id = %s", [log.pk])
    assert selectors.published_checkpoint(log=Log.objects.get(pk=log.pk)) == honest


def test_cosignature_rows_written_past_the_witnesses_count_for_nothing_and_are_reported(
    log: Log, signer: Signer, witnesses: WitnessSet, settings: LazySettings
) -> None:
    """An insider inserts cosignature rows: one by a key no witness holds (it never counts
    toward the quorum) and, with a plain INSERT, a configured witness's real line copied from
    another checkpoint: it does not verify over this one, so it is neither counted nor
    published, and verify_ledger reports it."""
    witness = witnesses.start("w1")
    settings.LEDGER_COSIGNATURE_QUORUM = 1
    honest = grow_and_sign(log, signer, 2)
    witnesses.stop("w1")
    unwitnessed = grow_and_sign(log, signer, 2)
    stranger = CosignerKey.generate("stranger.witness.example")
    body = body_of(unwitnessed.note)
    Cosignature.objects.create(
        checkpoint=unwitnessed,
        witness=stranger.verifier.name,
        key_id=f"{stranger.verifier.key_id:08x}",
        line=stranger.cosign(body, timestamp=1),
        timestamp=1,
    )
    assert selectors.published_checkpoint(log=Log.objects.get(pk=log.pk)) == honest

    trusted = parse_cosigner_vkey(witness.vkey)
    replayed = honest.cosignatures.get()  # w1's real line, over the tree of size 2
    insider.execute(
        "INSERT INTO ledger_cosignature (checkpoint_id, witness, key_id, line, timestamp,"
        " created_at) SELECT %s, witness, key_id, line, timestamp, now()"
        " FROM ledger_cosignature WHERE id = %s",
        [unwitnessed.pk, replayed.pk],
    )
    assert unwitnessed.cosignatures.filter(witness=trusted.name).exists()
    assert selectors.published_checkpoint(log=Log.objects.get(pk=log.pk)) == honest
    assert Checkpoint.objects.get(pk=unwitnessed.pk).published_note == unwitnessed.note
    assert selectors.cosignature_problems(log=log) == [
        f"cosignature of checkpoint 4 by {trusted.name}: invalid cosignature by {trusted.name}"
    ]
    with pytest.raises(CommandError, match="cosignature of checkpoint 4 by w1"):
        call_command("verify_ledger", log=log.origin, no_progress=True, stdout=io.StringIO())
