"""A premise that could not be read is refused as such, never as a false one: the local Resend
answers the premise's read key 403, and the refusal says `premise_unreadable`, naming the premise
and why, on a fresh submit and at recovery alike. Nothing is sent."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import resend

from gate_client.adapters.resend_email import ResendEmail
from gate_client.gate import Gate
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.receipts import Receipt
from gate_client.targets import Tier
from ledger.core.entries import EntryKind
from testkit.peers.resend_server import RunningResend, running_resend

LEASE = "lease_mail"
MESSAGE = {
    "from": "Support <support@example.com>",
    "to": ["delivered@resend.dev"],
    "subject": "Your refund is on the way",
    "text": "Your refund of $20.00 is on the way.",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningResend]:
    with running_resend(tmp_path_factory.mktemp("resend") / "emails.jsonl") as running:
        yield running


def not_yet_emailed(server: RunningResend, read_key: str) -> Premise:
    """Absolute: no email has gone to the customer yet, read from Resend's list of emails."""

    def check() -> PremiseResult:
        answer = httpx.get(
            f"{server.url}/emails",
            params={"limit": 100},
            headers={"Authorization": f"Bearer {read_key}"},
            timeout=10,
        )
        answer.raise_for_status()
        sent = [e for e in answer.json()["data"] if MESSAGE["to"][0] in e["to"]]
        return PremiseResult(not sent, {"sent": len(sent)})

    return Premise("not_yet_emailed", check)


def gate_for(tmp_path: Path, server: RunningResend, premise: Premise) -> tuple[Gate, LocalJournal]:
    journal = LocalJournal(tmp_path / "journal.jsonl")
    if journal.lease_state(LEASE) is None:
        expires = datetime.now(UTC) + timedelta(hours=1)
        journal.grant_lease(Lease(LEASE, "case-1", "email", expires, "finance"))
    target = ResendEmail(
        name="mail",
        tier=Tier.NEITHER,
        max_inflight=timedelta(seconds=5),
        api_key="re_interlock_test",
        api_url=server.url,
        http_client=resend.RequestsClient(timeout=5),
    )
    return Gate(journal, {"mail": target}, premises_for=lambda _: [premise]), journal


def proposal(premise: Premise) -> Proposal:
    return Proposal("case-1", "mail", "email", MESSAGE, LEASE, [premise])


def refusal_body(journal: LocalJournal, receipt: Receipt) -> dict[str, object]:
    [refused] = [e for e in journal.history(receipt.effect_id) if e.kind == EntryKind.REFUSED]
    body: dict[str, object] = refused.body_value()
    return body


def assert_names_the_403(body: dict[str, object]) -> None:
    assert body["failed"] == ["not_yet_emailed"]
    unreadable = body["unreadable"]
    assert isinstance(unreadable, dict) and list(unreadable) == ["not_yet_emailed"]
    assert "403" in unreadable["not_yet_emailed"]


def test_a_premise_answered_403_refuses_the_submit_as_unreadable(
    tmp_path: Path, server: RunningResend
) -> None:
    premise = not_yet_emailed(server, "not_a_resend_key")  # Resend answers 403 invalid_api_key
    gate, journal = gate_for(tmp_path, server, premise)
    receipt = gate.submit(proposal(premise))
    assert (receipt.final_state, receipt.happened) == ("REFUSED:premise_unreadable", False)
    assert_names_the_403(refusal_body(journal, receipt))
    assert server.emails() == []


def test_at_recovery_too_the_refusal_says_the_premise_could_not_be_read(
    tmp_path: Path, server: RunningResend
) -> None:
    """The agent proposed with a key that could read, and died; the restarted agent's key is
    refused 403: recovery refuses it as unreadable, not as stale."""
    readable = not_yet_emailed(server, "re_interlock_test")
    _, journal = gate_for(tmp_path, server, readable)
    decided = proposal(readable)
    journal.propose(effect_id=decided.effect_id, body=decided.proposed_body([readable.evaluate()]))
    journal.close()

    gate, journal = gate_for(tmp_path, server, not_yet_emailed(server, "not_a_resend_key"))
    [receipt] = gate.recover()
    assert receipt.final_state == "REFUSED:premise_unreadable_at_recovery"
    body = refusal_body(journal, receipt)
    assert_names_the_403(body)
    assert body["recheck"] is not None
    assert server.emails() == []
