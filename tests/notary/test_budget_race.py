"""Sixteen agents racing for the last of a budget, over HTTP through gunicorn, each a separate
client process with its own agent key, released together: whatever the interleaving, what
they dispatch fits the budget to the cent, every refusal is one the budget called for at its
turn, and every DISPATCHED's statement re-derives from the ledger."""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gate_client.budgets import budget_problems
from gate_client.proposal import Proposal
from ledger.core.entries import EntryKind
from ledger.selectors import iter_entries
from notary import services
from notary.models import Tenant
from testkit.factories import CENTS_MONEY
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.racers import racers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AGENTS = 16
ROUNDS = 6  # budgets raced for, each by all sixteen agents at once
LEFT = 10000  # the last $100.00 of each budget
SPENT = 3 * 5000  # what three earlier refunds of $50.00 spent of it


@pytest.fixture(scope="module")
def notary_url(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("budget_race")
    with django_db_blocker.unblock():
        database_url = child_database_url()
    with running_notary(database_url, directory, workers=2, threads=8) as url:
        yield url


def refund(tenant: Tenant, lease_id: str, case_id: str, cents: int) -> Proposal:
    return Proposal(
        case_id,
        "refunds",
        "refund",
        {"payment": f"pay_{case_id}", "amount_cents": cents, "currency": "USD"},
        lease_id,
        tenant=tenant.slug,
        case_class="support",
    )


def test_sixteen_agents_racing_for_the_last_100_dollars_dispatch_at_most_100(
    notary_url: str,
) -> None:
    tenant = services.tenant_create(slug=f"budget-{secrets.token_hex(4)}", name="budget race")
    services.target_register(
        tenant=tenant,
        name="refunds",
        tier=1,
        queryable=True,
        max_inflight=timedelta(seconds=5),
        money=CENTS_MONEY,
    )
    approver, _ = services.api_key_issue(tenant=tenant, role="approver", holder="alice")
    keys = [
        services.api_key_issue(tenant=tenant, role="agent", holder="refund-bot")
        for _ in range(AGENTS)
    ]
    chance = random.Random(19)
    with racers(notary_url, [token for _, token in keys]) as clients:
        for round_ in range(ROUNDS):
            lease = services.lease_grant(
                tenant=tenant,
                approver=approver,
                case_class="support",
                action="refund",
                expires_at=timezone.now() + timedelta(hours=1),
                requested_by="refund-bot",
                limits={"amount_cents": 5000},
                currency="USD",
                budgets=[{"per": "tenant", "window_seconds": 86400, "max_amount": SPENT + LEFT}],
            )
            for n in range(3):  # spend all but the last $100.00
                earlier = refund(tenant, lease.lease_id, f"r{round_}-early-{n}", 5000)
                services.effect_propose(
                    tenant=tenant,
                    effect_id=earlier.effect_id,
                    proposal=earlier.proposed_body([]),
                    dispatch_premises=[],
                )
            # Refunds of $5.00 to $50.00: which of them fit depends on who comes first.
            proposals = [
                refund(tenant, lease.lease_id, f"r{round_}-case-{n}", chance.randint(500, 5000))
                for n in range(AGENTS)
            ]
            answers = clients.race(
                [
                    {
                        "method": "POST",
                        "path": "/v1/effects",
                        "json": {
                            "effect_id": p.effect_id,
                            "proposal": p.proposed_body([]),
                            "dispatch": {"premises": []},
                        },
                    }
                    for p in proposals
                ]
            )
            dispatched = [a for a in answers if a["status"] == 201 and a["body"]["dispatched"]]
            refused = [a for a in answers if a not in dispatched]
            assert all(a["status"] == 201 for a in answers), answers
            assert dispatched and refused  # sixteen refunds of $27.50 on average: $440.00
            assert all(
                a["body"]["dispatch_refused"]["reason"] == "lease_budget" for a in refused
            ), refused
            spent = sum(a["body"]["dispatched"]["body"]["budget"]["amount"] for a in dispatched)
            assert spent <= LEFT, (round_, spent)

            # In ledger order, each dispatch saw the ones before it; each refusal was due.
            entries = list(iter_entries(log=tenant.log))
            statements = [
                e.body_value()["budget"]
                for e in entries
                if e.kind == EntryKind.DISPATCHED and e.body_value()["lease_id"] == lease.lease_id
            ]
            running = 0
            for statement in statements:
                assert statement["standings"][0]["spent_before"] == running
                running += statement["amount"]
            assert running == SPENT + spent
            smallest_refused = min(
                (
                    p.payload["amount_cents"]
                    for p, a in zip(proposals, answers, strict=True)
                    if a in refused
                ),
                default=None,
            )
            if smallest_refused is not None:
                assert running + smallest_refused > SPENT + LEFT
    assert budget_problems(iter_entries(log=tenant.log)) == ([], ROUNDS * 3 + _dispatched(tenant))


def _dispatched(tenant: Tenant) -> int:
    """How many raced refunds were dispatched, over all rounds."""
    entries = iter_entries(log=tenant.log)
    return sum(1 for e in entries if e.kind == EntryKind.DISPATCHED) - ROUNDS * 3
