"""Issue 16: witnesses end to end. Two real witness processes cosign what the notary signs; an
agent (NotaryJournal against a live notary under gunicorn) and an auditor (`python -m
gate_client.verify` on a real export) that require their cosignatures accept the witnessed
history and refuse a tree no witness cosigned: an insider with the database and the notary's
key regrows a restored log to a forked tree of the same size, signs it and sets the tenant's
requirement to 0 so the notary publishes it. Agents that never saw the honest tree are not
fooled, because the witnesses refused the fork (422, alerted) and never cosigned it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import LazySettings

from gate_client.notary_journal import NotaryError, NotaryJournal
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.note import Signer
from ledger.models import Log
from ledger.services import NewEntry
from notary import services
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.insider import back_up, restore
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.witness_process import WitnessSet, spec_cosigned_by

pytestmark = pytest.mark.slow


@pytest.fixture
def notary_url(transactional_db: None, tmp_path: Path, witnesses: WitnessSet) -> Iterator[str]:
    """The live notary, configured with the witnesses (only theirs count toward a quorum)."""
    listed = ", ".join(f"{url} {vkey}" for url, vkey in witnesses.settings.LEDGER_WITNESSES)
    with running_notary(
        child_database_url(), tmp_path, settings={"LEDGER_WITNESSES": listed}
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


def test_agents_and_auditors_accept_only_what_the_witnesses_cosigned(
    notary_url: str, signer: Signer, witnesses: WitnessSet, tmp_path: Path
) -> None:
    tenant = services.tenant_create(slug="shop", name="Shop")
    ledger_services.require_cosignatures(log=tenant.log, count=2)
    w1, w2 = witnesses.running["w1"], witnesses.running["w2"]
    grow_and_sign(tenant.log, signer, 0, 10)
    backup = back_up(tenant.log)
    grow_and_sign(tenant.log, signer, 10, 20)
    trusted = [w1.vkey, w2.vkey]

    with NotaryJournal(notary_url, agent(tenant), witnesses=trusted) as journal:
        honest = journal.check_history()
        assert honest is not None and honest.size == 20
        note = journal.seen_checkpoint
        assert note is not None
        assert spec_cosigned_by(note, w1.vkey) and spec_cosigned_by(note, w2.vkey)
    code, out = verify(tenant, signer, tmp_path, "--witness", w1.vkey, "--witness", w2.vkey)
    assert code == 0, out
    assert "witnesses: OK  cosigned by 2 of 2 trusted witnesses" in out

    # The insider: the database back to size 10, regrown to a forked 20, signed with the
    # notary's key; the witnesses refuse it, so the insider lowers the requirement to publish it.
    restore(backup)
    forked = grow_and_sign(tenant.log, signer, 10, 20, tag="forked")
    ledger_services.require_cosignatures(log=tenant.log, count=0)
    for witness in (w1, w2):
        assert witness.held(tenant.log.origin).text.startswith(note.split("\n\n")[0])
    assert spec_cosigned_by(forked, w1.vkey) is None

    with NotaryJournal(notary_url, agent(tenant), witnesses=trusted, witness_quorum=1) as fresh:
        with pytest.raises(NotaryError, match="not witnessed as required") as refused:
            fresh.check_history()  # a new agent, who never saw the honest 20
        assert refused.value.code == "not_witnessed"
        assert fresh.seen_checkpoint is None
    code, out = verify(tenant, signer, tmp_path, "--witness", w1.vkey, "--witness-quorum", "1")
    assert code == 1, out
    assert "witnesses: FAIL at line 1: the checkpoint is cosigned by 0 of the trusted" in out
    code, out = verify(tenant, signer, tmp_path)  # without witnesses the fork is invisible
    assert code == 0, out
    assert "witnesses: not checked: no --witness given" in out


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
