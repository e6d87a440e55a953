"""The crash matrix again, with every agent's journal kept by a live notary (gunicorn on the
test PostgreSQL database): the same cells, the same expected table, the same checker, and every
receipt verified against the tenant's whole ledger log. Leases are granted and revoked by an
approver through the API, so a revocation lands in the same log the dispatch is checked in.

It runs twice: with PROPOSED and DISPATCHED sent as two requests, so every crash point of the
table exists, and on the common path's single request, where after_proposed does not (the two
entries are one transaction) and every other crash point must still match the table."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.db import connection

from gate_client.faults import CrashPoint
from ledger.core.entries import Entry
from ledger.selectors import iter_entries
from notary import services
from notary.models import Tenant
from testkit.agents.agent_process import ACTION, KEY_WINDOW, TARGET, effect_id
from testkit.crash_matrix import (
    LOST_RESPONSE,
    MAX_INFLIGHT_SECONDS,
    TARGETS,
    Cell,
    CellJournal,
    Change,
    Harness,
    gate_problems,
    started_servers,
)
from testkit.notary_server import running_notary
from testkit.paths import child_database_url

# django_db: the test database must exist; the data lives outside any test transaction.
pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@dataclass(frozen=True)
class CellTenant:
    tenant: Tenant
    approver_token: str


class NotaryJournals:
    """A tenant per cell, its target declared at the cell's column: recover() settles every
    unsettled effect of its tenant, so cells sharing one would recover each other's."""

    def __init__(self, url: str, *, one_round_trip: bool) -> None:
        self.url = url
        self.one_round_trip = one_round_trip
        self._by_lease: dict[str, CellTenant] = {}

    def open_cell(self, case_id: str, target: str) -> CellJournal:
        try:
            tenant, agent_token, approver_token = _cell_tenant(target)
        finally:
            connection.close()  # this pool thread's own connection
        expires = datetime.now(UTC) + timedelta(hours=48)
        granted = self._approver_post(
            approver_token,
            "/v1/leases",
            {
                "case_id": case_id,
                "action": ACTION,
                "expires_at": expires.isoformat(),
                "requested_by": "email-agent",  # the holder of the agent key
            },
        )
        lease_id = granted["lease_id"]
        self._by_lease[lease_id] = CellTenant(tenant, approver_token)
        flags = ["--notary", self.url, "--notary-token", agent_token]
        flags += ["--tenant", tenant.slug, "--lease", lease_id]
        flags += [] if self.one_round_trip else ["--separate-steps"]
        return CellJournal(["notary", *flags], effect_id(case_id, tenant.slug), lease_id)

    def revoke(self, journal: CellJournal) -> None:
        held = self._by_lease[journal.lease_id]
        path = f"/v1/leases/{journal.lease_id}/revoke"
        self._approver_post(held.approver_token, path, {"reason": "the customer disputed it"})

    def entries(self, journal: CellJournal) -> tuple[list[Entry], str]:
        log = self._by_lease[journal.lease_id].tenant.log
        try:
            return list(iter_entries(log=log)), log.origin
        finally:
            connection.close()

    def _approver_post(self, token: str, path: str, body: dict[str, Any]) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        answer = httpx.post(f"{self.url}{path}", json=body, headers=headers, timeout=10)
        answer.raise_for_status()
        return answer.json()


def _cell_tenant(column: str) -> tuple[Tenant, str, str]:
    kind = TARGETS[column]
    tenant = services.tenant_create(
        slug=f"cell-{secrets.token_hex(6)}", name=f"crash matrix, column {column}"
    )
    services.target_register(
        tenant=tenant,
        name=TARGET,
        tier=kind.tier.value,
        queryable=kind.queryable,
        max_inflight=timedelta(seconds=MAX_INFLIGHT_SECONDS),
        key_window=KEY_WINDOW if kind.tier == 1 else None,
    )
    _, agent_token = services.api_key_issue(tenant=tenant, role="agent", holder="email-agent")
    _, approver_token = services.api_key_issue(tenant=tenant, role="approver", holder="finance")
    return tenant, agent_token, approver_token


@pytest.fixture(scope="module", params=["separate_steps", "one_round_trip"])
def notary_harness(
    request: pytest.FixtureRequest,
    django_db_setup: Any,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Harness]:
    """Agents whose journal is the notary, sending PROPOSED and DISPATCHED as two requests
    (every crash point of the table exists) or as the common path's one request."""
    directory = tmp_path_factory.mktemp("crash_matrix_notary")
    one_round_trip = request.param == "one_round_trip"
    with django_db_blocker.unblock():
        try:
            with (
                running_notary(child_database_url(), directory) as url,
                started_servers(directory) as servers,
            ):
                journals = NotaryJournals(url, one_round_trip=one_round_trip)
                harness = Harness(servers, directory, journals)
                try:
                    yield harness
                finally:
                    harness.close()
        finally:
            call_command("flush", interactive=False, verbosity=0)


@pytest.mark.parametrize("crash", list(CrashPoint))
def test_every_crash_settles_as_designed_with_the_notary_as_journal(
    notary_harness: Harness, crash: CrashPoint
) -> None:
    journals = notary_harness.journals
    assert isinstance(journals, NotaryJournals)
    if journals.one_round_trip and crash == CrashPoint.AFTER_PROPOSED:
        pytest.skip("one request records PROPOSED and DISPATCHED: there is no moment between")
    runs = notary_harness.run(
        Cell("gate", crash, target, change) for target in TARGETS for change in Change
    )
    problems = [problem for run in runs.values() for problem in gate_problems(run)]
    assert not problems, "\n".join(problems)


def test_a_lost_response_is_settled_by_its_sender_with_the_notary_as_journal(
    notary_harness: Harness,
) -> None:
    runs = notary_harness.run(Cell("gate", None, target, Change.NONE) for target in LOST_RESPONSE)
    problems = [problem for run in runs.values() for problem in gate_problems(run)]
    assert not problems, "\n".join(problems)
