"""A standing lease: one approval for a class of cases (a queue, a tag the proposal names) or a
pattern of case ids, in one currency and within per-effect limits, through the API and the
notary's dispatch-time check, with receipts that replay it offline."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gate_client.proposal import Proposal
from notary import selectors, services
from notary.errors import NotaryConflict
from notary.models import Tenant
from testkit.factories import CENTS_MONEY, client_for, register

pytestmark = pytest.mark.django_db


@pytest.fixture
def standing(acme: Tenant) -> dict[str, Any]:
    """An approver's standing lease over every case of refunds-queue: refunds of at most
    $50.00, in USD."""
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
            "currency": "usd",
            "expires_at": (timezone.now() + timedelta(days=7)).isoformat(),
            "requested_by": "refund-bot",
        },
        format="json",
    )
    assert granted.status_code == 201, granted.json()
    lease: dict[str, Any] = granted.json()
    return lease


def dispatch(tenant: Tenant, lease_id: str, case_id: str, case_class: str, cents: int) -> str:
    """Propose and dispatch a refund of `cents` USD for `case_id` of `case_class`; its id."""
    proposal = Proposal(
        case_id,
        "payments",
        "refund",
        {"amount_cents": cents, "currency": "usd"},
        lease_id,
        tenant=tenant.slug,
        case_class=case_class,
    )
    body = proposal.proposed_body([])
    services.effect_propose(tenant=tenant, effect_id=proposal.effect_id, proposal=body)
    services.effect_dispatch(
        tenant=tenant, effect_id=proposal.effect_id, attempt=1, premises=[], recovery=False
    )
    return proposal.effect_id


def test_one_standing_approval_covers_every_case_of_its_class(
    acme: Tenant, standing: dict[str, Any]
) -> None:
    assert (standing["case_id"], standing["case_class"], standing["currency"]) == (
        "",
        "refunds-queue",
        "USD",
    )
    lease_id = standing["lease_id"]
    sent = [dispatch(acme, lease_id, f"case-{n}", "refunds-queue", 1000 + n) for n in range(3)]
    sent.append(dispatch(acme, lease_id, "case-9", "refunds-queue", 5000))  # at the limit
    for effect_id in sent:
        receipt = selectors.effect_receipt(tenant=acme, effect_id=effect_id, payload_hash=None)
        assert receipt.receipt.final_state == "DISPATCHED"
        assert receipt.receipt.authorized_when_fired is True


@pytest.mark.parametrize(
    ("case_class", "cents", "detail"),
    [
        ("vip-queue", 1000, "lease covers refund on cases of class refunds-queue"),
        ("", 1000, "lease covers refund on cases of class refunds-queue"),
        ("refunds-queue", 5001, "amount_cents=5001 exceeds the limit 5000"),
    ],
)
def test_a_case_outside_the_class_or_over_the_limit_is_refused(
    acme: Tenant, standing: dict[str, Any], case_class: str, cents: int, detail: str
) -> None:
    with pytest.raises(NotaryConflict) as refused:
        dispatch(acme, standing["lease_id"], "case-1", case_class, cents)
    assert (refused.value.extra["reason"], refused.value.detail) == ("lease_scope", detail)


def test_a_committed_refund_under_a_standing_lease_was_authorized_when_fired(
    acme: Tenant, standing: dict[str, Any]
) -> None:
    effect_id = dispatch(acme, standing["lease_id"], "case-1", "refunds-queue", 2500)
    services.effect_record_outcome(
        tenant=acme,
        effect_id=effect_id,
        kind="COMMITTED",
        body={"state": "COMMITTED", "attempt": 1, "result_ref": "re_1", "recheck": None},
    )
    receipt = selectors.effect_receipt(tenant=acme, effect_id=effect_id, payload_hash=None)
    assert receipt.receipt.final_state == "COMMITTED"
    assert receipt.receipt.authorized_when_fired is True  # replayed from the entries alone


@pytest.mark.parametrize(
    "scope",
    [{}, {"case_id": "case-1", "case_class": "refunds-queue"}, {"case_pattern": "", "case_id": ""}],
)
def test_a_lease_names_exactly_one_scope_of_cases(acme: Tenant, scope: dict[str, str]) -> None:
    client_for(acme, "agent", "refund-bot")
    approver = client_for(acme, "approver", "maria@acme.example")
    body = {
        "action": "refund",
        "expires_at": (timezone.now() + timedelta(days=1)).isoformat(),
        "requested_by": "refund-bot",
        **scope,
    }
    refused = approver.post("/v1/leases", body, format="json")
    assert refused.status_code == 400, refused.json()
    assert set(refused.json()) >= {"error", "detail"}


def test_a_pattern_lease_covers_matching_case_ids(acme: Tenant) -> None:
    register(
        acme,
        "payments",
        tier=1,
        queryable=True,
        max_inflight=timedelta(seconds=5),
        money=CENTS_MONEY,
    )
    agent = client_for(acme, "agent", "refund-bot")
    asked = agent.post(
        "/v1/lease-requests",
        {
            "case_pattern": "RF-*",
            "action": "refund",
            "currency": "USD",
            "limits": {"amount_cents": 5000},
            "expires_at": (timezone.now() + timedelta(days=1)).isoformat(),
        },
        format="json",
    )
    assert asked.status_code == 201, asked.json()
    approver = client_for(acme, "approver", "maria@acme.example")
    granted = approver.post("/v1/leases", {"request_id": asked.json()["request_id"]}, format="json")
    assert granted.status_code == 201, granted.json()
    lease_id = granted.json()["lease_id"]
    assert granted.json()["case_pattern"] == "RF-*"
    assert dispatch(acme, lease_id, "RF-1042", "", 1200)
    with pytest.raises(NotaryConflict, match="cases matching RF-\\*"):
        dispatch(acme, lease_id, "CS-7", "", 1200)


@pytest.fixture
def counted(acme: Tenant) -> dict[str, Any]:
    """A standing lease with no amount limit and a count budget: at most 2 emails an hour to
    the cases of support-queue; an email target that moves no money, and a payments one."""
    register(acme, "mail", tier=3, max_inflight=timedelta(seconds=5))
    register(acme, "payments", tier=3, max_inflight=timedelta(seconds=5), money=CENTS_MONEY)
    client_for(acme, "agent", "mail-bot")
    approver = client_for(acme, "approver", "maria@acme.example")
    granted = approver.post(
        "/v1/leases",
        {
            "case_class": "support-queue",
            "action": "send",
            "budgets": [{"per": "tenant", "window_seconds": 3600, "max_count": 2}],
            "expires_at": (timezone.now() + timedelta(days=7)).isoformat(),
            "requested_by": "mail-bot",
        },
        format="json",
    )
    assert granted.status_code == 201, granted.json()
    lease: dict[str, Any] = granted.json()
    return lease


def send(tenant: Tenant, lease_id: str, case_id: str, target: str, payload: Any) -> str:
    proposal = Proposal(
        case_id, target, "send", payload, lease_id, tenant=tenant.slug, case_class="support-queue"
    )
    services.effect_propose(
        tenant=tenant, effect_id=proposal.effect_id, proposal=proposal.proposed_body([])
    )
    services.effect_dispatch(
        tenant=tenant, effect_id=proposal.effect_id, attempt=1, premises=[], recovery=False
    )
    return proposal.effect_id


def test_a_standing_lease_on_an_action_without_money_is_bounded_by_a_count_budget(
    acme: Tenant, counted: dict[str, Any]
) -> None:
    lease_id = counted["lease_id"]
    sent = [send(acme, lease_id, f"case-{n}", "mail", {"to": f"c{n}@x.example"}) for n in (1, 2)]
    with pytest.raises(NotaryConflict) as third:
        send(acme, lease_id, "case-3", "mail", {"to": "c3@x.example"})
    assert third.value.extra["reason"] == "lease_budget"
    assert "allows 2 effects per 3600 s and 2 were dispatched" in third.value.detail
    for n, effect_id in enumerate(sent):
        receipt = selectors.effect_receipt(tenant=acme, effect_id=effect_id, payload_hash=None)
        assert receipt.receipt.authorized_when_fired is True
        assert receipt.receipt.budget is not None
        assert receipt.receipt.budget["amount"] == 0
        assert receipt.receipt.budget["standings"][0]["count_before"] == n


def test_the_same_lease_on_a_money_target_is_refused_for_bounding_no_amount(
    acme: Tenant, counted: dict[str, Any]
) -> None:
    with pytest.raises(NotaryConflict) as refused:
        send(acme, counted["lease_id"], "case-1", "payments", {"amount_cents": 100})
    assert refused.value.extra["reason"] == "lease_scope"
    assert refused.value.detail == (
        "a standing lease bounds each effect's amount: it has no 'amount_cents' limit"
    )
