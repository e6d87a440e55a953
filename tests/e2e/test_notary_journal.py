"""NotaryJournal against a live notary (gunicorn, the test PostgreSQL database): the common path
takes two requests per effect, and with the notary unreachable nothing is sent."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.utils import timezone

from gate_client.gate import Gate
from gate_client.journal import JournalError
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.receipts import verify_receipt
from gate_client.targets import Found, LookupOutcome, SendOutcome, Sent, Tier
from ledger.selectors import iter_entries
from notary import services
from notary.models import Lease, Tenant
from tests.conftest import child_database_url
from tests.notary_server import free_port, running_notary

pytestmark = pytest.mark.slow


class NoOpTarget:
    name = "noop"
    tier = Tier.DEDUPES
    queryable = True
    key_window = timedelta(hours=24)
    max_inflight = timedelta(seconds=1)

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        self.sent.append(effect_id)
        return Sent(f"ref_{len(self.sent)}")

    def lookup(self, effect_id: str) -> LookupOutcome:
        return Found(f"ref_{effect_id}")


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
        tenant=tenant, name="noop", tier=1, queryable=True, max_inflight=timedelta(seconds=1)
    )
    _, token = services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    approver = services.api_key_issue(tenant=tenant, role="approver", holder="alice")[0]
    lease = services.lease_grant(
        tenant=tenant,
        approver=approver,
        case_id="case_1",
        action="refund",
        expires_at=timezone.now() + timedelta(hours=1),
        requested_by="bot",
    )
    return tenant, token, lease


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
    assert len(transport.requests) == requests, transport.requests
    assert target.sent == [receipt.effect_id]
    verify_receipt(receipt, iter_entries(log=tenant.log), origin=tenant.log.origin)


def test_with_the_notary_unreachable_nothing_is_sent(transactional_db: None) -> None:
    tenant, token, lease = setup_tenant()
    target = NoOpTarget()
    nowhere = f"http://127.0.0.1:{free_port()}"
    with NotaryJournal(nowhere, token, retries=1, backoff=0.01) as journal:
        gate = Gate(journal, {"noop": target})
        with pytest.raises(JournalError, match="notary unreachable"):
            gate.submit(proposal(tenant, lease))
    assert target.sent == []
