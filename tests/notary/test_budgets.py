"""Rolling budgets on a standing lease, at the notary: spent at an effect's first dispatch in
the same transaction as its DISPATCHED, stated in that entry, refused at the edge, given back
by an effect that ends not performed, held by one that may have happened, counted per agent
key where the budget says so, and shown on the receipt."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from gate_client.budgets import budget_problems
from gate_client.proposal import Proposal
from gate_client.verify import Failure, verify_export
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.entries import EntryKind
from ledger.core.note import Signer
from ledger.selectors import iter_entries
from notary import selectors, services
from notary.errors import NotaryConflict
from notary.exports import export_receipts
from notary.models import ApiKey, Effect, Lease, Tenant
from testkit.factories import CENTS_MONEY, client_for, register

pytestmark = pytest.mark.django_db

DAY = 24 * 3600
# $100.00 and 5 refunds per day for all keys together; $60.00 per day for each key.
BUDGETS = [
    {"per": "tenant", "window_seconds": DAY, "max_amount": 10000, "max_count": 5},
    {"per": "agent_key", "window_seconds": DAY, "max_amount": 6000},
]


@pytest.fixture
def lease(acme: Tenant) -> Lease:
    register(
        acme,
        "payments",
        tier=1,
        queryable=True,
        max_inflight=timedelta(seconds=5),
        money=CENTS_MONEY,
    )
    client_for(acme, "agent", "refund-bot")
    approver = client_for(acme, "approver", "maria@acme.example")
    granted = approver.post(
        "/v1/leases",
        {
            "case_class": "refunds-queue",
            "action": "refund",
            "limits": {"amount_cents": 5000},
            "currency": "USD",
            "budgets": BUDGETS,
            "expires_at": (timezone.now() + timedelta(days=7)).isoformat(),
            "requested_by": "refund-bot",
        },
        format="json",
    )
    assert granted.status_code == 201, granted.json()
    assert granted.json()["budgets"] == [
        {**BUDGETS[0]},
        {**BUDGETS[1], "max_count": None},
    ]
    return Lease.objects.get(lease_id=granted.json()["lease_id"])


def agent_key(tenant: Tenant) -> ApiKey:
    key, _ = services.api_key_issue(tenant=tenant, role="agent", holder="refund-bot")
    return key


def propose(tenant: Tenant, lease: Lease, case_id: str, cents: int) -> str:
    proposal = Proposal(
        case_id,
        "payments",
        "refund",
        {"amount_cents": cents, "currency": "USD"},
        lease.lease_id,
        tenant=tenant.slug,
        case_class="refunds-queue",
    )
    services.effect_propose(
        tenant=tenant, effect_id=proposal.effect_id, proposal=proposal.proposed_body([])
    )
    return proposal.effect_id


def spend(tenant: Tenant, lease: Lease, case_id: str, cents: int, key: ApiKey) -> str:
    """Propose and dispatch a refund of `cents` under `key`; its effect id."""
    effect_id = propose(tenant, lease, case_id, cents)
    services.effect_dispatch(
        tenant=tenant, effect_id=effect_id, attempt=1, premises=[], recovery=False, dispatcher=key
    )
    return effect_id


def refused(tenant: Tenant, lease: Lease, case_id: str, cents: int, key: ApiKey) -> str:
    with pytest.raises(NotaryConflict) as refusal:
        spend(tenant, lease, case_id, cents, key)
    assert refusal.value.extra["reason"] == "lease_budget", refusal.value.detail
    return refusal.value.detail


def ends(tenant: Tenant, effect_id: str, kind: str, body: dict[str, Any]) -> None:
    services.effect_record_outcome(tenant=tenant, effect_id=effect_id, kind=kind, body=body)


def receipt(tenant: Tenant, effect_id: str) -> dict[str, Any]:
    shown = selectors.effect_receipt(tenant=tenant, effect_id=effect_id, payload_hash=None)
    return shown.receipt.to_dict()


def test_the_budget_is_spent_to_the_cent_and_not_one_cent_more(acme: Tenant, lease: Lease) -> None:
    first, second = agent_key(acme), agent_key(acme)
    spend(acme, lease, "case-1", 5000, first)
    spend(acme, lease, "case-2", 1000, first)  # the first key's $60.00, exactly
    assert "allows 6000 per 86400 s, 6000 is spent and this is 1" in refused(
        acme, lease, "case-3", 1, first
    )
    spend(acme, lease, "case-4", 3999, second)
    assert "allows 10000 per 86400 s, 9999 is spent and this is 2" in refused(
        acme, lease, "case-5", 2, second
    )
    last = spend(acme, lease, "case-6", 1, second)  # $100.00 for the tenant, exactly

    shown = receipt(acme, last)
    assert shown["authorized_when_fired"] is True
    assert shown["budget"]["amount"] == 1
    assert shown["budget"]["spender"] == second.key_id
    tenant_budget, key_budget = shown["budget"]["standings"]
    assert (tenant_budget["per"], tenant_budget["spent_before"], tenant_budget["count_before"]) == (
        "tenant",
        9999,
        3,
    )
    assert (key_budget["per"], key_budget["spent_before"], key_budget["max_amount"]) == (
        "agent_key",
        3999,
        6000,
    )
    # Refusals record nothing: only the four dispatches spent.
    assert Effect.objects.filter(tenant=acme, spent_at__isnull=False).count() == 4
    assert Effect.objects.filter(tenant=acme, attempts=0).count() == 2


def test_the_count_is_a_budget_too(acme: Tenant, lease: Lease) -> None:
    keys = [agent_key(acme) for _ in range(3)]
    for n in range(5):
        spend(acme, lease, f"case-{n}", 100, keys[n % 3])
    assert "allows 5 effects per 86400 s and 5 were dispatched" in refused(
        acme, lease, "case-5", 100, keys[2]
    )


def test_a_failed_or_refused_effect_gives_its_amount_back(acme: Tenant, lease: Lease) -> None:
    key, other = agent_key(acme), agent_key(acme)
    declined = spend(acme, lease, "case-1", 5000, key)
    spend(acme, lease, "case-2", 1000, key)
    refused(acme, lease, "case-3", 1000, key)
    ends(acme, declined, "FAILED", {"attempt": 1, "code": "card_declined"})
    spend(acme, lease, "case-3b", 5000, key)  # the declined $50.00 is back

    gone = spend(acme, lease, "case-4", 3000, other)
    refused(acme, lease, "case-5", 1001, other)
    ends(acme, gone, "REFUSED", {"reason": "stale_premise_at_recovery", "recheck": {}})
    spend(acme, lease, "case-5b", 1001, other)


def test_an_ambiguous_effect_holds_its_amount_until_a_person_says_it_did_not_happen(
    acme: Tenant, lease: Lease
) -> None:
    key, other = agent_key(acme), agent_key(acme)
    unknown = spend(acme, lease, "case-1", 5000, key)
    ends(acme, unknown, "AMBIGUOUS", {"attempt": 1, "reason": "timeout"})
    spend(acme, lease, "case-2", 5000, other)
    refused(acme, lease, "case-3", 1, other)  # the ambiguous $50.00 may have been paid
    services.effect_resolve(
        tenant=acme, effect_id=unknown, happened=False, by="gil", reason="not in the bank's list"
    )
    spend(acme, lease, "case-3b", 1000, other)


def test_a_resend_is_the_same_refund_and_spends_nothing_more(acme: Tenant, lease: Lease) -> None:
    key = agent_key(acme)
    effect_id = spend(acme, lease, "case-1", 5000, key)
    resent = services.effect_dispatch(
        tenant=acme, effect_id=effect_id, attempt=2, premises=[], recovery=True, dispatcher=key
    )
    assert "budget" not in resent.body_value()
    assert Effect.objects.get(effect_id=effect_id).spent_amount == 5000
    spend(acme, lease, "case-2", 1000, key)  # $60.00 for the key: the resend counted once


def test_every_statement_re_derives_from_the_ledger(acme: Tenant, lease: Lease) -> None:
    key = agent_key(acme)
    failed = spend(acme, lease, "case-1", 4000, key)
    spend(acme, lease, "case-2", 2000, key)
    ends(acme, failed, "FAILED", {"attempt": 1, "code": "card_declined"})
    spend(acme, lease, "case-3", 4000, key)
    entries = list(iter_entries(log=acme.log))
    assert budget_problems(entries) == ([], 3)
    services.effects_rebuild(tenant=acme)  # the spend columns follow from the entries alone
    assert Effect.objects.filter(tenant=acme, spent_at__isnull=False).count() == 2


def test_the_admin_shows_the_budgets_in_words_what_they_hold_and_each_effects_statement(
    acme: Tenant, lease: Lease, admin_client: Client
) -> None:
    key = agent_key(acme)
    spend(acme, lease, "case-1", 4000, key)
    unknown = spend(acme, lease, "case-2", 1950, key)
    ends(acme, unknown, "AMBIGUOUS", {"attempt": 1, "reason": "timeout"})

    page = admin_client.get(f"/admin/notary/lease/{lease.pk}/change/").content.decode()
    assert (
        "at most $100.00 and 5 effects in any 1 day, for all agent keys together; "
        "at most $60.00 in any 1 day, for each agent key"
    ) in page
    assert f"$59.50 in 2 effects; $59.50 in 2 effects (most by one key: {key.key_id})" in page

    effect = Effect.objects.get(effect_id=unknown)
    review = admin_client.get(f"/admin/notary/ambiguouseffect/{effect.pk}/change/")
    assert review.status_code == 200
    assert (
        "Budget at its first dispatch: $40.00 in 1 effects of $100.00 and 5 effects in any 1 "
        "day were spent before it, for all agent keys together; $40.00 in 1 effects of $60.00 "
        "in any 1 day were spent before it, for each agent key; it spent $19.50."
    ) in review.content.decode()


def verified(tenant: Tenant, signer: Signer) -> int:
    """Sign a checkpoint, export every receipt and verify it offline: the budget statements
    re-derived."""
    ledger_services.sign_checkpoint(log=tenant.log, signer=signer)
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=tenant)]
    return verify_export(lines, [log_verifier(tenant.log.origin, signer)]).budgets


def test_the_auditor_re_derives_each_statement_and_refuses_a_false_one(
    acme: Tenant, lease: Lease, signer: Signer
) -> None:
    key = agent_key(acme)
    failed = spend(acme, lease, "case-1", 4000, key)
    spend(acme, lease, "case-2", 2000, key)
    ends(acme, failed, "FAILED", {"attempt": 1, "code": "card_declined"})
    spend(acme, lease, "case-3", 4000, key)
    assert verified(acme, signer) == 3

    # A notary that understates what was spent: its statement says the budget was untouched.
    understated = propose(acme, lease, "case-4", 1000)
    standings = [
        {**BUDGETS[0], "spent_before": 0, "count_before": 0},
        {**BUDGETS[1], "max_count": None, "spent_before": 0, "count_before": 0},
    ]
    body = {
        "attempt": 1,
        "lease_id": lease.lease_id,
        "premises": [],
        "recovery": False,
        "budget": {"spender": key.key_id, "amount": 1000, "standings": standings},
    }
    with transaction.atomic():
        ledger_services.append_entry(
            log=acme.log, kind=EntryKind.DISPATCHED, body=body, effect_id=understated
        )
    with pytest.raises(Failure) as failure:
        verified(acme, signer)
    assert failure.value.verdict == "integrity"
    assert "states 0 spent in 0 effects per tenant before it; the ledger holds 6000 in 2" in (
        failure.value.detail
    )


@pytest.mark.parametrize(
    ("budgets", "currency", "detail"),
    [
        ([{**BUDGETS[0], "max_amount": 1}], None, "needs the lease to name its currency"),
        ([BUDGETS[0], BUDGETS[0]], "USD", "two budgets per tenant"),
        ([{"per": "tenant", "window_seconds": DAY}], "USD", "bounds max_amount, max_count"),
        ([{**BUDGETS[0], "per": "everyone"}], "USD", "per"),
        ([{**BUDGETS[0], "window_seconds": 0}], "USD", "window_seconds"),
        ([{**BUDGETS[0], "max_amount": -5}], "USD", "max_amount"),
        ([{**BUDGETS[0], "max_count": 1.5}], "USD", "max_count"),
        ({"per": "tenant"}, "USD", "budgets"),
    ],
)
def test_a_budget_that_bounds_nothing_sensible_is_a_400(
    acme: Tenant, budgets: Any, currency: str | None, detail: str
) -> None:
    client_for(acme, "agent", "refund-bot")
    approver = client_for(acme, "approver", "maria@acme.example")
    answer = approver.post(
        "/v1/leases",
        {
            "case_class": "refunds-queue",
            "action": "refund",
            "limits": {"amount_cents": 5000},
            "currency": currency,
            "budgets": budgets,
            "expires_at": (timezone.now() + timedelta(days=7)).isoformat(),
            "requested_by": "refund-bot",
        },
        format="json",
    )
    assert answer.status_code == 400, answer.json()
    assert detail in str(answer.json()["detail"])
    assert not Lease.objects.exists()


def test_a_requested_budget_is_granted_on_its_terms(acme: Tenant) -> None:
    agent = client_for(acme, "agent", "refund-bot")
    approver = client_for(acme, "approver", "maria@acme.example")
    asked = agent.post(
        "/v1/lease-requests",
        {
            "case_pattern": "RF-*",
            "action": "refund",
            "limits": {"amount_cents": 5000},
            "currency": "USD",
            "budgets": BUDGETS[:1],
            "expires_at": (timezone.now() + timedelta(days=1)).isoformat(),
        },
        format="json",
    )
    assert asked.status_code == 201, asked.json()
    granted = approver.post("/v1/leases", {"request_id": asked.json()["request_id"]}, format="json")
    assert granted.status_code == 201, granted.json()
    assert granted.json()["budgets"] == BUDGETS[:1]
