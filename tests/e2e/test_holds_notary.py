"""Holds on ambiguity end to end: the gate over NotaryJournal against a live notary (gunicorn,
the test PostgreSQL database) and the reference service as its own process, acting every time it
is asked (no dedupe). A refund whose answer was lost is AMBIGUOUS; the case's next effect on the
service is HELD, naming it, and the service never sees it, however often the agent submits;
once a person resolves the refund, the same submission sends the held effect exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gate_client.gate import Gate
from gate_client.http_target import HttpTarget
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Proposal
from gate_client.receipts import verify_receipt
from gate_client.targets import Tier
from ledger.selectors import effect_entries, iter_entries
from notary import services
from notary.models import Effect, Tenant
from testkit.factories import leased, register
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.peers.reference_service import RunningServer, running_server

pytestmark = pytest.mark.slow
INFLIGHT = timedelta(seconds=5)


@pytest.fixture
def notary_url(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    with running_notary(child_database_url(), tmp_path) as url:
        yield url


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(tmp_path / "acts.jsonl", dedupe=False, lookup=False) as running:
        yield running


def proposal(tenant: Tenant, action: str) -> Proposal:
    lease = leased(tenant, "case_1", action)
    payload = {"amount_cents": 700, "currency": "USD"}
    return Proposal("case_1", "svc", action, payload, lease.lease_id, tenant=tenant.slug)


def test_a_held_effect_is_never_sent_and_goes_once_after_a_person_resolves_its_holder(
    notary_url: str, service: RunningServer
) -> None:
    tenant = services.tenant_create(slug="shop", name="Shop")
    register(tenant, "svc", tier=3, max_inflight=INFLIGHT)
    _, token = services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    refund, credit = proposal(tenant, "refund"), proposal(tenant, "credit")
    target = HttpTarget("svc", service.url, Tier.NEITHER, False, None, INFLIGHT)

    with NotaryJournal(notary_url, token) as journal:
        gate = Gate(journal, {"svc": target})
        service.drop_next_response(refund.effect_id)  # it acts, and the answer is lost
        assert gate.submit(refund).final_state == "AMBIGUOUS"

        tries = [gate.submit(credit) for _ in range(3)]  # an agent in a loop

        assert {r.final_state for r in tries} == {"HELD"}
        assert {r.held_by for r in tries} == {refund.effect_id}
        assert service.acts(credit.effect_id) == []
        held = [e.kind for e in effect_entries(log=tenant.log, effect_id=credit.effect_id)]
        assert held == ["PROPOSED", "HELD"]
        verify_receipt(tries[-1], iter_entries(log=tenant.log), origin=tenant.log.origin)
        row = Effect.objects.get(tenant=tenant, effect_id=credit.effect_id)
        assert (row.state, row.held_by) == ("HELD", refund.effect_id)

        services.effect_resolve(
            tenant=tenant,
            effect_id=refund.effect_id,
            happened=True,
            reason="the service's log shows the refund",
            by="fiona",
        )
        released = gate.submit(credit)
        again = gate.submit(credit)

    assert released.final_state == "COMMITTED"
    assert released.held_by is None
    assert again == released
    assert len(service.acts(credit.effect_id)) == 1  # exactly once
    assert len(service.acts(refund.effect_id)) == 1
    verify_receipt(released, iter_entries(log=tenant.log), origin=tenant.log.origin)


def test_an_effect_held_by_evidence_stays_held_when_its_lease_ends_never_refused_unsent(
    notary_url: str, service: RunningServer
) -> None:
    """The agent proposed a refund and stopped; the service says it performed it (a person did
    it by hand). Then the lease is revoked. The agent submits again: the notary refuses the
    lease, but the evidence says the refund was done, so the effect stays HELD for a person,
    happened unknown, never REFUSED as if nothing had happened, and nothing is sent."""
    tenant = services.tenant_create(slug="shop", name="Shop")
    register(tenant, "svc", tier=3, max_inflight=INFLIGHT)
    _, token = services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    refund = proposal(tenant, "refund")
    services.effect_propose(
        tenant=tenant, effect_id=refund.effect_id, proposal=refund.proposed_body([])
    )
    by_hand = {"source": "attestation", "outcome": "performed", "result_ref": "rf_by_hand"}
    services.effect_observe(tenant=tenant, effect_id=refund.effect_id, evidence=by_hand)
    services.lease_revoke(
        tenant=tenant, lease_id=refund.lease_id, by="fiona", reason="the case was closed"
    )
    target = HttpTarget("svc", service.url, Tier.NEITHER, False, None, INFLIGHT)

    with NotaryJournal(notary_url, token) as journal:
        receipt = Gate(journal, {"svc": target}).submit(refund)

    assert (receipt.final_state, receipt.happened) == ("HELD", "unknown")
    assert receipt.held_by == refund.effect_id and receipt.contradicted
    assert service.acts(refund.effect_id) == []
    kinds = [e.kind for e in effect_entries(log=tenant.log, effect_id=refund.effect_id)]
    assert "REFUSED" not in kinds and "DISPATCHED" not in kinds
    verify_receipt(receipt, iter_entries(log=tenant.log), origin=tenant.log.origin)
