"""Issue 16: an agent remembers the last checkpoint it saw. NotaryJournal against a live notary
(gunicorn, the test database) accepts a checkpoint at size 20 with a consistency proof from the
one at 10 and keeps it in its checkpoint file; then the notary's database is restored from a
backup taken at size 10 (as the superuser: the newer entries, nodes and checkpoints deleted and
the head put back) and, on its next contact, a restarted agent reports the rollback, a fork at
the same size and a rewritten, larger tree, each with both signed checkpoints, and takes no
answer of that notary as valid after it. A receipt fetched with its proofs is checked the
same way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gate_client.gate import Gate
from gate_client.notary_journal import HistoryRewritten, NotaryError, NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.note import Signer
from ledger.models import Log
from ledger.services import NewEntry
from notary import services
from notary.models import Tenant
from testkit.factories import leased
from testkit.insider import Backup, back_up, restore
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.world import NoOpTarget

pytestmark = pytest.mark.slow


@pytest.fixture
def notary_url(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    with running_notary(child_database_url(), tmp_path) as url:
        yield url


def grow(log: Log, start: int, end: int, *, tag: str = "honest") -> None:
    ledger_services.append_entries(
        log=log,
        items=[NewEntry(kind="OBSERVED", body={"n": n, "tag": tag}) for n in range(start, end)],
    )


def signed(log: Log, signer: Signer) -> str:
    log.refresh_from_db()
    return str(ledger_services.sign_checkpoint(log=log, signer=signer).note)


def agent(tenant: Tenant) -> str:
    return services.api_key_issue(tenant=tenant, role="agent", holder="bot")[1]


def seen_at_20(url: str, tenant: Tenant, signer: Signer, state: Path) -> tuple[Backup, str, str]:
    """The agent sees size 10, then 20 (proved consistent); the backup is taken at 10."""
    grow(tenant.log, 0, 10)
    at_10 = signed(tenant.log, signer)
    backup = back_up(tenant.log)
    with NotaryJournal(url, agent(tenant), checkpoint_file=state) as journal:
        assert journal.check_history() is not None
        assert journal.seen_checkpoint == at_10
        grow(tenant.log, 10, 20)
        at_20 = signed(tenant.log, signer)
        checked = journal.check_history()
        assert checked is not None and checked.size == 20
    assert json.loads(state.read_text())["note"] == at_20
    return backup, at_10, at_20


def test_a_restored_backup_is_a_rollback_the_agent_reports(
    notary_url: str, signer: Signer, tmp_path: Path
) -> None:
    tenant = services.tenant_create(slug="shop", name="Shop")
    state = tmp_path / "checkpoint.json"
    backup, at_10, at_20 = seen_at_20(notary_url, tenant, signer, state)
    restore(backup)
    with NotaryJournal(notary_url, agent(tenant), checkpoint_file=state) as restarted:
        with pytest.raises(HistoryRewritten) as rolled_back:
            restarted.unsettled()  # recovering: the first thing an agent does on restart
        assert "rolled back from size 20 to 10" in str(rolled_back.value)
        assert rolled_back.value.remembered == at_20
        assert rolled_back.value.received == at_10
        with pytest.raises(HistoryRewritten):
            restarted.history("anything")  # nothing this notary says is valid any more
    assert json.loads(state.read_text())["note"] == at_20  # the evidence is kept


@pytest.mark.parametrize(
    ("regrow_to", "reported"),
    [(20, "forked: two roots at size 20"), (25, "size 25 is not consistent with size 20")],
)
def test_a_regrown_log_is_a_fork_the_agent_reports(
    notary_url: str,
    signer: Signer,
    tmp_path: Path,
    regrow_to: int,
    reported: str,
    signed_heads_file: Path,
) -> None:
    tenant = services.tenant_create(slug="shop", name="Shop")
    state = tmp_path / "checkpoint.json"
    backup, _, at_20 = seen_at_20(notary_url, tenant, signer, state)
    restore(backup)
    grow(tenant.log, 10, regrow_to, tag="forged")
    # The insider has the key's host too: the notary's memory of size 20 goes, or it would
    # refuse to sign (tests/ledger/test_history_attacks.py); the agent still holds 20.
    signed_heads_file.unlink()
    forged = signed(tenant.log, signer)  # consistent with the checkpoint at 10 the notary kept
    vkeys = [log_verifier(tenant.log.origin, signer).vkey]
    journal = NotaryJournal(notary_url, agent(tenant), checkpoint_file=state, vkeys=vkeys)
    with journal, pytest.raises(HistoryRewritten) as fork:
        journal.check_history()
    assert reported in str(fork.value)
    assert (fork.value.remembered, fork.value.received) == (at_20, forged)


def test_a_checkpoint_under_another_key_is_refused(
    notary_url: str, signer: Signer, tmp_path: Path
) -> None:
    tenant = services.tenant_create(slug="shop", name="Shop")
    grow(tenant.log, 0, 3)
    signed(tenant.log, signer)
    stranger = [log_verifier(tenant.log.origin, Signer.generate("x")).vkey]
    with NotaryJournal(notary_url, agent(tenant), vkeys=stranger) as journal:
        with pytest.raises(NotaryError, match="does not verify"):
            journal.check_history()
        assert journal.seen_checkpoint is None


def submitted(journal: NotaryJournal, tenant: Tenant) -> str:
    """One effect through the gate to COMMITTED; its id."""
    services.target_register(
        tenant=tenant,
        name="noop",
        tier=1,
        queryable=True,
        max_inflight=NoOpTarget.max_inflight,
        key_window=timedelta(hours=24),
    )
    lease = leased(tenant, "case_1", "refund")
    proposal = Proposal(
        case_id="case_1",
        target="noop",
        action="refund",
        payload={"amount_cents": 500},
        lease_id=lease.lease_id,
        premises=[Premise("paid", lambda: PremiseResult(True, {"status": "paid"}))],
        tenant=tenant.slug,
    )
    receipt = Gate(journal, {"noop": NoOpTarget()}).submit(proposal)
    assert receipt.final_state == "COMMITTED"
    return receipt.effect_id


def test_a_proved_receipt_checks_its_checkpoint_against_the_last_seen(
    notary_url: str, signer: Signer, tmp_path: Path
) -> None:
    tenant = services.tenant_create(slug="shop", name="Shop")
    state = tmp_path / "seen.json"
    with NotaryJournal(notary_url, agent(tenant), checkpoint_file=state) as journal:
        effect_id = submitted(journal, tenant)
        at_effect = signed(tenant.log, signer)
        proved = journal.proved_receipt(effect_id)
        assert proved.receipt.final_state == "COMMITTED"
        assert proved.checkpoint is not None
        assert proved.note == at_effect and journal.seen_checkpoint == at_effect
        backup = back_up(tenant.log)
        grow(tenant.log, backup.size, backup.size + 5)
        later = signed(tenant.log, signer)
        assert journal.check_history() is not None
        restore(backup)
        with pytest.raises(HistoryRewritten) as rolled_back:
            journal.proved_receipt(effect_id)
    assert (rolled_back.value.remembered, rolled_back.value.received) == (later, at_effect)
