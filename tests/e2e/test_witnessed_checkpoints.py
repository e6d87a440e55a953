"""Issue 16: witnesses end to end. Two real witness processes cosign what the notary signs; an
agent (NotaryJournal against a live notary under gunicorn) and an auditor (`python -m
gate_client.verify` on a real export) accept the witnessed history. Then the attack as a DBA
makes it, with the PostgreSQL superuser's statements: the log cut back to an older size both
witnesses cosigned, the checkpoints and cosignatures above it deleted, and the quorum "row"
set to 0. The notary refuses to sign anything on the cut log (its memory of what it signed,
beside its key, and the witnesses' latest both hold the larger tree), the UPDATE of the quorum
finds no such column, an agent that saw the larger tree reports the rollback, and the auditor's
verifier, given no witness flag, refuses the old cosigned checkpoint served again as stale,
while accepting it verified as of the time it was current."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import LazySettings
from django.db import DatabaseError, transaction

from gate_client.notary_journal import HistoryRewritten, NotaryError, NotaryJournal
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.note import Signer
from ledger.models import Checkpoint, Log
from ledger.selectors import TreeHeadRefused, published_checkpoint
from ledger.services import NewEntry
from notary import services
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.inbox import wait_for
from testkit.insider import back_up, execute, restore
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.witness_process import WitnessSet, spec_cosigned_by

pytestmark = pytest.mark.slow


@pytest.fixture
def quorum() -> int:
    """How many of the two witnesses must cosign a checkpoint before it is published."""
    return 2


@pytest.fixture
def notary_url(
    transactional_db: None,
    tmp_path: Path,
    witnesses: WitnessSet,
    settings: LazySettings,
    quorum: int,
) -> Iterator[str]:
    """The live notary, configured with the witnesses and the quorum (the test process, which
    signs, with the same)."""
    settings.LEDGER_COSIGNATURE_QUORUM = quorum
    listed = ", ".join(f"{url} {vkey}" for url, vkey in witnesses.settings.LEDGER_WITNESSES)
    with running_notary(
        child_database_url(),
        tmp_path,
        settings={"LEDGER_WITNESSES": listed, "LEDGER_COSIGNATURE_QUORUM": str(quorum)},
    ) as url:
        yield url


@pytest.fixture
def witnesses(tmp_path: Path, settings: LazySettings, signer: Signer) -> Iterator[WitnessSet]:
    started = WitnessSet(
        tmp_path, settings, family=f"{settings.NOTARY_ORIGIN}={signer.verifier.vkey}"
    )
    started.start("w1")
    started.start("w2")
    yield started
    started.stop_all()


def grow_and_sign(log: Log, signer: Signer, start: int, end: int, *, tag: str = "honest") -> str:
    """Append entries and sign the tree head (the witnesses are sent it once it commits)."""
    ledger_services.append_entries(
        log=log,
        items=[NewEntry(kind="OBSERVED", body={"n": n, "tag": tag}) for n in range(start, end)],
    )
    log.refresh_from_db()
    return str(ledger_services.sign_checkpoint(log=log, signer=signer).note)


def agent(tenant: Tenant) -> str:
    return services.api_key_issue(tenant=tenant, role="agent", holder="bot")[1]


def verify(tenant: Tenant, signer: Signer, tmp_path: Path, *args: str) -> tuple[int, str]:
    export = tmp_path / "export.jsonl"
    export.write_text("".join(export_receipts(tenant=tenant)), encoding="utf-8")
    vkey = log_verifier(tenant.log.origin, signer).vkey
    command = [sys.executable, "-m", "gate_client.verify", str(export), "--vkey", vkey, *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    return done.returncode, done.stdout + done.stderr


def cosigned_at(note: str, witnesses: WitnessSet) -> int:
    """When the witnesses cosigned the note: the later of their cosignature times."""
    times = [spec_cosigned_by(note, w.vkey) for w in witnesses.running.values()]
    assert None not in times, note
    return max(t for t in times if t is not None)


def test_a_log_cut_back_to_an_older_cosigned_size_is_refused_by_the_notary_and_the_verifier(
    notary_url: str,
    signer: Signer,
    witnesses: WitnessSet,
    tmp_path: Path,
    signed_heads_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tenant = services.tenant_create(slug="shop", name="Shop")
    log = tenant.log
    w1, w2 = witnesses.running["w1"], witnesses.running["w2"]
    grow_and_sign(log, signer, 0, 10)
    at_10 = published_checkpoint(log=log)
    assert at_10 is not None and at_10.size == 10
    t1 = cosigned_at(at_10.published_note, witnesses)
    backup = back_up(log)
    # The next cosignatures a few seconds later (the witnesses' clocks count whole seconds).
    wait_for(lambda: time.time() >= t1 + 3)
    grow_and_sign(log, signer, 10, 20)
    trusted = [w1.vkey, w2.vkey]
    seen = tmp_path / "seen.json"
    with NotaryJournal(
        notary_url, agent(tenant), witnesses=trusted, checkpoint_file=seen
    ) as journal:
        honest = journal.check_history()
        assert honest is not None and honest.size == 20
        at_20 = journal.seen_checkpoint
        assert at_20 is not None
    t2 = cosigned_at(at_20, witnesses)
    bound = str(t2 - t1 - 1)  # the cosignatures of size 20 are fresh, those of 10 are not
    code, out = verify(tenant, signer, tmp_path, "--max-cosignature-age", bound, "--as-of", str(t2))
    assert code == 0, out
    assert "witnesses: OK  cosigned by 2 of the 2 witnesses the export names" in out

    # The DBA, as the PostgreSQL superuser: the log back to 10 (its checkpoint and both
    # cosignatures kept, everything above deleted), and the old way to publish what no witness
    # cosigned, which finds no column now.
    restore(backup)
    with pytest.raises(DatabaseError, match="required_cosignatures"), transaction.atomic():
        execute("UPDATE ledger_log SET required_cosignatures = 0 WHERE id = %s", [log.pk])
    assert published_checkpoint(log=Log.objects.get(pk=log.pk)) == at_10  # served again

    # The notary signs nothing on the cut log: its memory holds 20, and so do the witnesses.
    log = Log.objects.get(pk=log.pk)
    ledger_services.append_entries(log=log, items=[NewEntry(kind="OBSERVED", body={"n": "x"})])
    log.refresh_from_db()
    for holder in ("the notary's memory of what it signed", "witness w1.witness.example"):
        with (
            caplog.at_level(logging.CRITICAL, logger="ledger.alerts"),
            pytest.raises(TreeHeadRefused, match=f"{holder} holds a signed tree of size 20"),
        ):
            ledger_services.sign_checkpoint(log=log, signer=signer)
        signed_heads_file.unlink(missing_ok=True)  # the insider with the key's host, too
    assert "checkpoint signing refused" in caplog.text
    assert Checkpoint.objects.filter(log=log).count() == 1

    # The agent that saw 20 reports the rollback; the auditor's verifier, given no witness
    # flag, refuses the old cosignatures served again, and accepts them as of their time.
    journal = NotaryJournal(notary_url, agent(tenant), witnesses=trusted, checkpoint_file=seen)
    with journal, pytest.raises(HistoryRewritten, match="rolled back from size 20 to 10"):
        journal.check_history()
    code, out = verify(tenant, signer, tmp_path, "--max-cosignature-age", bound)
    assert code == 1, out
    assert "witnesses: FAIL at line 1: the checkpoint is cosigned by 0 of the trusted" in out
    assert "stale or future cosignatures: w1.witness.example at " in out
    code, out = verify(tenant, signer, tmp_path, "--max-cosignature-age", bound, "--as-of", str(t1))
    assert code == 0, out


@pytest.mark.parametrize("quorum", [0])
def test_a_quorum_of_one_accepts_while_one_witness_is_down(
    notary_url: str, signer: Signer, witnesses: WitnessSet
) -> None:
    tenant = services.tenant_create(slug="shop", name="Shop")
    witnesses.stop("w2")
    grow_and_sign(tenant.log, signer, 0, 5)
    trusted = [witnesses.running["w1"].vkey, witnesses.running["w2"].vkey]
    with NotaryJournal(notary_url, agent(tenant), witnesses=trusted, witness_quorum=1) as one:
        checked = one.check_history()
        assert checked is not None and checked.size == 5
    both = NotaryJournal(notary_url, agent(tenant), witnesses=trusted)
    missing = r"cosigned by 1 of .*\(w1\.witness\.example\)"
    with both, pytest.raises(NotaryError, match=missing):
        both.check_history()
