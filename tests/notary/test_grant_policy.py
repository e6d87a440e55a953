"""A tenant's grant policy bounds what any of its approvers may grant: the largest amount_cents
limit on one lease and the longest a lease may run. A grant past either is refused (403,
`beyond_policy`) and writes nothing; the policy is set by create_tenant and in the admin, and
the database refuses a bound that is not positive."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from ledger import selectors as ledger_selectors
from notary.models import (
    DEFAULT_MAX_LEASE_AMOUNT_CENTS,
    DEFAULT_MAX_LEASE_DURATION,
    Lease,
    LeaseRequest,
    Tenant,
)
from testkit.factories import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Tenant:
    """A tenant whose approvers grant at most 5000 cents, for at most an hour."""
    out = io.StringIO()
    call_command(
        "create_tenant",
        *("--slug", "shop", "--name", "Shop"),
        *("--max-lease-amount-cents", "5000", "--max-lease-seconds", "3600"),
        stdout=out,
    )
    return Tenant.objects.get(slug="shop")


def terms(*, amount: int = 2000, minutes: float = 30, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "case_id": "case_4711",
        "action": "refund",
        "expires_at": (timezone.now() + timedelta(minutes=minutes)).isoformat(),
        "limits": {"amount_cents": amount},
    }
    body.update(changes)
    return body


def entries(tenant: Tenant) -> list[Any]:
    return list(ledger_selectors.iter_entries(log=tenant.log))


def test_create_tenant_sets_the_policy_and_defaults_keep_it_wide(shop: Tenant) -> None:
    assert shop.max_lease_amount_cents == 5000
    assert shop.max_lease_duration == timedelta(hours=1)
    call_command("create_tenant", "--slug", "wide", "--name", "Wide", stdout=io.StringIO())
    wide = Tenant.objects.get(slug="wide")
    assert wide.max_lease_amount_cents == DEFAULT_MAX_LEASE_AMOUNT_CENTS
    assert wide.max_lease_duration == DEFAULT_MAX_LEASE_DURATION
    for bad in (["--max-lease-amount-cents", "0"], ["--max-lease-seconds", "-1"]):
        with pytest.raises(CommandError):
            call_command("create_tenant", "--slug", "bad", "--name", "Bad", *bad)
    assert not Tenant.objects.filter(slug="bad").exists()


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"amount": 5001}, "amount_cents 5001"),
        ({"minutes": 61}, "at most 3600 s"),
    ],
)
def test_a_grant_beyond_the_policy_is_a_403_and_writes_nothing(
    shop: Tenant, changes: dict[str, Any], says: str
) -> None:
    client_for(shop, "agent", "refund-bot")
    approver = client_for(shop, "approver", "maria@shop.example")
    refused = approver.post(
        "/v1/leases", terms(requested_by="refund-bot", **changes), format="json"
    )
    assert refused.status_code == 403, refused.json()
    assert refused.json()["error"] == "beyond_policy"
    assert says in refused.json()["detail"]
    assert set(refused.json()) == {"error", "detail"}
    assert entries(shop) == []
    assert not Lease.objects.exists()


@pytest.mark.parametrize("changes", [{"amount": 5001}, {"minutes": 61}])
def test_a_request_beyond_the_policy_is_not_granted_either(
    shop: Tenant, changes: dict[str, Any]
) -> None:
    agent = client_for(shop, "agent", "refund-bot")
    approver = client_for(shop, "approver", "maria@shop.example")
    asked = agent.post("/v1/lease-requests", terms(**changes), format="json")
    assert asked.status_code == 201
    refused = approver.post("/v1/leases", {"request_id": asked.json()["request_id"]}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"] == "beyond_policy"
    assert entries(shop) == []
    assert LeaseRequest.objects.get().lease is None


def test_a_grant_within_the_policy_stands(shop: Tenant) -> None:
    client_for(shop, "agent", "refund-bot")
    approver = client_for(shop, "approver", "maria@shop.example")
    at_the_edge = terms(requested_by="refund-bot", amount=5000, minutes=59)
    granted = approver.post("/v1/leases", at_the_edge, format="json")
    assert granted.status_code == 201, granted.json()
    email = terms(requested_by="refund-bot", action="email")
    del email["limits"]  # no amount: nothing for the amount bound to bound
    assert approver.post("/v1/leases", email, format="json").status_code == 201
    assert [e.kind for e in entries(shop)] == ["LEASE_GRANTED", "LEASE_GRANTED"]


def test_the_database_refuses_a_bound_that_is_not_positive(shop: Tenant) -> None:
    for bad in ({"max_lease_amount_cents": 0}, {"max_lease_duration": timedelta(0)}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Tenant.objects.filter(pk=shop.pk).update(**bad)
    shop.refresh_from_db()
    assert (shop.max_lease_amount_cents, shop.max_lease_duration) == (5000, timedelta(hours=1))


def test_the_admin_edits_the_policy_and_refuses_a_bad_one(
    shop: Tenant, admin_client: Client
) -> None:
    page = f"/admin/notary/tenant/{shop.pk}/change/"
    shown = admin_client.get(page)
    assert shown.status_code == 200
    assert 'name="max_lease_amount_cents"' in shown.content.decode()
    assert 'name="slug"' not in shown.content.decode()  # the rest is read only

    changed = admin_client.post(
        page,
        {"max_lease_amount_cents": "9000", "max_lease_duration": "2:00:00", "hold_scope": "case"},
    )
    assert changed.status_code == 302
    shop.refresh_from_db()
    assert (shop.max_lease_amount_cents, shop.max_lease_duration) == (9000, timedelta(hours=2))
    assert shop.hold_scope == "case"

    refused = admin_client.post(page, {"max_lease_amount_cents": "0", "max_lease_duration": "1"})
    assert refused.status_code == 200
    assert "must be a positive integer" in refused.content.decode()
    shop.refresh_from_db()
    assert shop.max_lease_amount_cents == 9000

    client_for(shop, "agent", "refund-bot")
    approver = client_for(shop, "approver", "maria@shop.example")
    granted = approver.post(
        "/v1/leases", terms(requested_by="refund-bot", amount=9000, minutes=90), format="json"
    )
    assert granted.status_code == 201, "the new policy holds from the next grant on"


def test_the_policy_bounds_a_limit_on_stripes_amount_field_too(shop: Tenant) -> None:
    """Stripe's payloads carry `amount`: a limit on it is an amount limit like amount_cents,
    so it cannot be used to approve more than the policy allows."""
    client_for(shop, "agent", "refund-bot")
    approver = client_for(shop, "approver", "maria@shop.example")
    refused = approver.post(
        "/v1/leases",
        terms(requested_by="refund-bot", limits={"amount": 1_000_000}),
        format="json",
    )
    assert refused.status_code == 403, refused.json()
    assert refused.json()["detail"].startswith("amount 1000000 is more than this tenant lets")
    assert entries(shop) == []


def test_a_standing_lease_without_an_amount_limit_is_granted(shop: Tenant) -> None:
    """It may cover actions that move no money; on a money target its dispatch is refused
    (tests/notary/test_standing_leases.py)."""
    client_for(shop, "agent", "refund-bot")
    approver = client_for(shop, "approver", "maria@shop.example")
    standing = terms(requested_by="refund-bot", case_class="refunds-queue", limits={})
    del standing["case_id"]
    granted = approver.post("/v1/leases", standing, format="json")
    assert granted.status_code == 201, granted.json()
