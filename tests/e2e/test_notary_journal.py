"""NotaryJournal against a live notary (gunicorn, the test PostgreSQL database): the common path
takes two requests per effect; with the notary unreachable nothing is sent; and a tier-3 target
whose evidence the notary holds is recovered as tier 2."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate_client.authorization import DispatchRequest
from gate_client.gate import Gate, TargetMismatch
from gate_client.journal import JournalError
from gate_client.money import MoneyDeclaration
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.receipts import verify_receipt
from gate_client.targets import InDoubt, SendOutcome, Tier
from ledger.selectors import iter_entries
from notary import services
from notary.models import Lease, Tenant
from testkit.factories import leased
from testkit.notary_server import free_port, running_notary
from testkit.paths import child_database_url
from testkit.world import NoOpTarget

pytestmark = pytest.mark.slow
EVIDENCE_WINDOW = timedelta(milliseconds=500)
MAIL_INFLIGHT = timedelta(milliseconds=100)


class CountingTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        return super().handle_request(request)


@pytest.fixture
def notary_url(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    with running_notary(child_database_url(), tmp_path) as url:
        yield url


def setup_tenant() -> tuple[Tenant, str, Lease]:
    tenant = services.tenant_create(slug="shop", name="Shop")
    services.target_register(
        tenant=tenant,
        name="noop",
        tier=1,
        queryable=True,
        max_inflight=NoOpTarget.max_inflight,
        key_window=timedelta(hours=24),
    )
    _, token = services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    return tenant, token, leased(tenant, "case_1", "refund")


def proposal(tenant: Tenant, lease: Lease) -> Proposal:
    return Proposal(
        case_id="case_1",
        target="noop",
        action="refund",
        payload={"amount_cents": 500},
        lease_id=lease.lease_id,
        premises=[Premise("paid", lambda: PremiseResult(True, {"status": "paid"}))],
        tenant=tenant.slug,
    )


@pytest.mark.parametrize(("one_round_trip", "requests"), [(True, 2), (False, 5)])
def test_the_common_path_takes_two_requests(
    notary_url: str, one_round_trip: bool, requests: int
) -> None:
    tenant, token, lease = setup_tenant()
    transport = CountingTransport()
    target = NoOpTarget()
    with NotaryJournal(
        notary_url, token, transport=transport, one_round_trip=one_round_trip
    ) as journal:
        receipt = Gate(journal, {"noop": target}).submit(proposal(tenant, lease))
    assert receipt.final_state == "COMMITTED"
    assert receipt.authorized_when_fired is True
    declared, *per_effect = transport.requests
    assert declared == "GET /v1/targets/noop"  # once per gate and target, not per effect
    assert len(per_effect) == requests, transport.requests
    assert target.sent == [receipt.effect_id]
    verify_receipt(receipt, iter_entries(log=tenant.log), origin=tenant.log.origin)


def test_with_the_notary_unreachable_nothing_is_sent(transactional_db: None) -> None:
    tenant, token, lease = setup_tenant()
    target = NoOpTarget()
    nowhere = f"http://127.0.0.1:{free_port()}"
    with (
        NotaryJournal(nowhere, token, retries=1, backoff=0.01) as journal,
        pytest.raises(JournalError, match="notary unreachable"),
    ):
        Gate(journal, {"noop": target}).submit(proposal(tenant, lease))
    assert target.sent == []


def test_a_gate_whose_adapter_declares_otherwise_refuses_to_start(notary_url: str) -> None:
    """A target is declared once: the notary's record. An adapter that says otherwise (here a
    longer max in-flight) stops the gate before anything is written, naming the difference;
    so does a target the notary has no record of."""
    tenant, token, lease = setup_tenant()
    target = NoOpTarget()
    target.max_inflight = timedelta(seconds=5)
    with NotaryJournal(notary_url, token) as journal:
        with pytest.raises(TargetMismatch) as refused:
            Gate(journal, {"noop": target}).submit(proposal(tenant, lease))
        with pytest.raises(JournalError, match="not registered"):
            Gate(journal, {"elsewhere": NoOpTarget()}).declared("elsewhere")
    assert "max_inflight: datetime.timedelta(seconds=5) != datetime.timedelta(seconds=30)" in str(
        refused.value
    )
    assert not any(e.effect_id for e in iter_entries(log=tenant.log))


def test_a_gate_whose_adapter_reads_money_elsewhere_refuses_to_start(notary_url: str) -> None:
    """The money declaration is part of what must match: an adapter reading the amount from
    another field than the notary's record says stops the gate before anything is written."""
    tenant, token, lease = setup_tenant()
    target = NoOpTarget()
    target.money = MoneyDeclaration(amount_field="amount_cents")
    with (
        NotaryJournal(notary_url, token) as journal,
        pytest.raises(TargetMismatch, match="money: MoneyDeclaration") as refused,
    ):
        Gate(journal, {"noop": target}).submit(proposal(tenant, lease))
    assert "!= None" in str(refused.value)
    assert not any(e.effect_id for e in iter_entries(log=tenant.log))


class Mailer(NoOpTarget):
    """Tier 3 (no key, no lookup) whose delivery evidence the notary holds."""

    name = "mail"
    tier = Tier.NEITHER
    queryable = False
    key_window: timedelta | None = None
    max_inflight = MAIL_INFLIGHT
    evidence_window: timedelta | None = EVIDENCE_WINDOW

    def __init__(self, *, lose_answer: bool = False) -> None:
        super().__init__()
        self.lose_answer = lose_answer

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        sent = super().send(effect_id, payload)
        if self.lose_answer:
            raise InDoubt("the answer was lost on the wire")
        return sent


def mail_tenant() -> tuple[Tenant, str, str, Lease]:
    tenant, token, lease = setup_tenant()
    services.target_register(
        tenant=tenant,
        name="mail",
        tier=3,
        queryable=False,
        max_inflight=MAIL_INFLIGHT,
        evidence_window=EVIDENCE_WINDOW,
    )
    _, service_token = services.api_key_issue(
        tenant=tenant, role="service", holder="mailer", targets=["mail"]
    )
    return tenant, token, service_token, lease


def mail(tenant: Tenant, lease: Lease) -> Proposal:
    return Proposal(
        case_id="case_1",
        target="mail",
        action="refund",
        payload={"to": "customer@example.com"},
        lease_id=lease.lease_id,
        tenant=tenant.slug,
    )


def attest(notary_url: str, service_token: str, effect_id: str) -> httpx.Response:
    return httpx.post(
        f"{notary_url}/v1/attestations",
        json={"effect_id": effect_id, "performed": True, "reference": "msg_1"},
        headers={"Authorization": f"Bearer {service_token}"},
    )


def test_tier_3_stays_in_flight_while_the_window_is_open_then_evidence_settles_it(
    notary_url: str,
) -> None:
    tenant, token, service_token, lease = mail_tenant()
    target = Mailer(lose_answer=True)
    with NotaryJournal(notary_url, token) as journal:
        gate = Gate(journal, {"mail": target}, patience=timedelta(0))
        receipt = gate.submit(mail(tenant, lease))
        # The window is open and nothing was seen: no verdict, and no person asked yet.
        assert (receipt.final_state, receipt.happened) == ("DISPATCHED", "unknown")
        assert journal.unsettled() == [receipt.effect_id]
        attested = attest(notary_url, service_token, receipt.effect_id)
        assert attested.json()["settled"] == "committed_on_evidence"
        settled = gate.submit(mail(tenant, lease))  # asking again sends nothing
    assert settled.final_state == "COMMITTED_ON_EVIDENCE"
    assert settled.happened is True
    assert target.sent == [receipt.effect_id]
    verify_receipt(settled, iter_entries(log=tenant.log), origin=tenant.log.origin)


def test_not_seen_within_the_window_is_ambiguous_never_resent_and_late_evidence_settles_it(
    notary_url: str,
) -> None:
    """Rule a: silence proves nothing. The agent died after the dispatch; the webhooks were
    lost. recover() after the window says AMBIGUOUS, resends nothing, refuses nothing; the late
    webhook still settles it without a person."""
    tenant, token, service_token, lease = mail_tenant()
    proposal = mail(tenant, lease)
    with NotaryJournal(notary_url, token) as journal:
        request = DispatchRequest.of_proposal(
            proposal.effect_id, proposal.proposed_body([]), 1, [], False
        )
        started = journal.propose_and_dispatch(
            effect_id=proposal.effect_id, body=proposal.proposed_body([]), request=request
        )
        assert started is not None and started[1] is not None  # dispatched; then the agent died
        time.sleep(EVIDENCE_WINDOW.total_seconds() + 0.1)
        target = Mailer()
        [receipt] = Gate(journal, {"mail": target}).recover()
        assert (receipt.final_state, receipt.happened) == ("AMBIGUOUS", "unknown")
        assert target.sent == [], "a target that does not dedupe would have sent it twice"
        assert attest(notary_url, service_token, proposal.effect_id).json()["settled"] == (
            "committed_on_evidence"
        )
        assert Gate(journal, {"mail": target}).submit(proposal).final_state == (
            "COMMITTED_ON_EVIDENCE"
        )
    assert target.sent == []


def test_an_agent_cannot_write_the_notarys_words(notary_url: str) -> None:
    """Rule g: states and rechecks only the notary's own lookup or evidence produce are a 400
    that says why, and change nothing."""
    tenant, token, _, lease = mail_tenant()
    proposal = mail(tenant, lease)
    with NotaryJournal(notary_url, token) as journal:
        request = DispatchRequest.of_proposal(
            proposal.effect_id, proposal.proposed_body([]), 1, [], False
        )
        journal.propose_and_dispatch(
            effect_id=proposal.effect_id, body=proposal.proposed_body([]), request=request
        )
        size = len(list(iter_entries(log=tenant.log)))
        for body in [
            {
                "state": "COMMITTED_ON_QUERY",
                "attempt": 1,
                "result_ref": "x",
                "recheck": {"by": "notary", "lookup": "found"},
            },
            {"state": "COMMITTED_ON_EVIDENCE", "attempt": 1, "result_ref": "x", "recheck": {}},
        ]:
            answer = httpx.post(
                f"{notary_url}/v1/effects/{proposal.effect_id}/outcome",
                json={"kind": "COMMITTED", "body": body},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"] == "invalid"
            assert "notary" in answer.json()["detail"] or "evidence" in answer.json()["detail"]
    assert len(list(iter_entries(log=tenant.log))) == size
