"""The lease endpoints: approvers grant and revoke, tenants never see each other's leases."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Model
from django.utils import timezone

from ledger import selectors as ledger_selectors
from notary import selectors
from notary.models import Lease, Tenant
from notary.services import MAX_REVOCATION_REASON
from testkit.factories import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def requester(acme: Tenant) -> None:
    """The requester a grant names holds an agent key of the tenant."""
    client_for(acme, "agent", "bob@acme.example")


def grant_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "case_id": "case_4711",
        "action": "refund",
        "expires_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        "requested_by": "bob@acme.example",
        "limits": {"amount_cents": 2000},
    }
    body.update(changes)
    return body


def test_an_approver_grants_shows_and_revokes_a_lease(acme: Tenant) -> None:
    approver = client_for(acme, "approver", "alice@acme.example")
    granted = approver.post("/v1/leases", grant_body(), format="json")
    assert granted.status_code == 201, granted.json()
    lease = granted.json()
    assert lease["granted_by"] == "alice@acme.example"
    assert lease["limits"] == {"amount_cents": 2000}

    agent = client_for(acme, "agent", "refund-bot")
    shown = agent.get(f"/v1/leases/{lease['lease_id']}")
    assert shown.status_code == 200
    assert shown.json() == lease

    revoke = f"/v1/leases/{lease['lease_id']}/revoke"
    for blank in ("", " \n "):
        refused = approver.post(revoke, {"reason": blank}, format="json")
        assert refused.status_code == 400, refused.json()
    revoked = approver.post(revoke, {"reason": "disputed"}, format="json")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_by"] == "alice@acme.example"
    kinds = [e.kind for e in ledger_selectors.iter_entries(log=acme.log)]
    assert kinds == ["LEASE_GRANTED", "LEASE_REVOKED"]


def test_a_revocation_reasons_limit_counts_the_characters_sent(acme: Tenant) -> None:
    """The schema's maxLength holds for the reason as sent: one character past the limit is
    refused even when it is white space (the serializer used to trim before counting, so the
    API took what its schema said it refuses). The ledger records the reason trimmed, as the
    service always did."""
    approver = client_for(acme, "approver", "alice@acme.example")
    lease_id = approver.post("/v1/leases", grant_body(), format="json").json()["lease_id"]
    revoke = f"/v1/leases/{lease_id}/revoke"
    size = ledger_selectors.log_head(log=acme.log).size
    refused = approver.post(revoke, {"reason": " " + "x" * MAX_REVOCATION_REASON}, format="json")
    assert refused.status_code == 400, refused.json()
    assert refused.json()["error"] == "invalid"
    assert ledger_selectors.log_head(log=acme.log).size == size
    at_the_limit = " " + "x" * (MAX_REVOCATION_REASON - 1)
    assert approver.post(revoke, {"reason": at_the_limit}, format="json").status_code == 200
    [revoked] = ledger_selectors.iter_entries_of_kind(log=acme.log, kind="LEASE_REVOKED")
    assert revoked.body_value()["reason"] == at_the_limit.strip()


def test_roles_are_enforced(acme: Tenant) -> None:
    for role in ("agent", "service", "auditor"):
        refused = client_for(acme, role, f"{role}-key").post(
            "/v1/leases", grant_body(), format="json"
        )
        assert refused.status_code == 403
        assert refused.json()["error"] == "permission_denied"
    assert acme.log.entries.count() == 0


def test_another_tenants_lease_does_not_exist_for_you(acme: Tenant, globex: Tenant) -> None:
    lease = client_for(acme, "approver", "alice@acme.example").post(
        "/v1/leases", grant_body(), format="json"
    )
    lease_id = lease.json()["lease_id"]
    outsider = client_for(globex, "approver", "eve@globex.example")
    assert outsider.get(f"/v1/leases/{lease_id}").status_code == 404
    revoke = outsider.post(f"/v1/leases/{lease_id}/revoke", {"reason": "x"}, format="json")
    assert revoke.status_code == 404
    assert revoke.json() == {"error": "not_found", "detail": f"no lease {lease_id!r}"}
    assert acme.log.entries.count() == 1
    assert globex.log.entries.count() == 0


@pytest.mark.parametrize(
    ("changes", "field_or_message"),
    [
        ({"case_id": ""}, "case_id"),
        ({"expires_at": "tomorrow"}, "expires_at"),
        ({"limits": {"amount_cents": -5}}, "limits"),
        ({"limits": {"amount_cents": "lots"}}, "limits"),
        ({"requested_by": "alice@acme.example"}, "cannot also approve it"),
        ({"expires_at": (timezone.now() - timedelta(hours=1)).isoformat()}, "in the future"),
        ({"payload_hash": "xyz"}, "64 lowercase hex"),
    ],
)
def test_bad_input_is_a_400_with_the_error_body_and_writes_nothing(
    acme: Tenant, changes: dict[str, Any], field_or_message: str
) -> None:
    approver = client_for(acme, "approver", "alice@acme.example")
    reply = approver.post("/v1/leases", grant_body(**changes), format="json")
    assert reply.status_code == 400
    body = reply.json()
    assert body["error"] == "invalid"
    assert field_or_message in str(body["detail"])
    assert acme.log.entries.count() == 0


def test_a_lease_names_its_currency_and_a_bad_one_is_a_400(acme: Tenant) -> None:
    approver = client_for(acme, "approver", "alice@acme.example")
    granted = approver.post("/v1/leases", grant_body(currency="eur"), format="json")
    assert granted.status_code == 201, granted.json()
    assert granted.json()["currency"] == "EUR"
    refused = approver.post("/v1/leases", grant_body(currency="euros"), format="json")
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid"
    assert "currency" in refused.json()["detail"]
    plain = approver.post("/v1/leases", grant_body(), format="json")
    assert plain.json()["currency"] == ""  # approves any currency, as before


def test_a_leases_entries_are_its_grant_and_revocation_read_in_its_tenant_only(
    acme: Tenant, globex: Tenant
) -> None:
    approver = client_for(acme, "approver", "alice@acme.example")
    lease_id = approver.post("/v1/leases", grant_body(), format="json").json()["lease_id"]
    granted = selectors.lease_entries(tenant=acme, lease_id=lease_id)
    assert [e.kind for e in granted] == ["LEASE_GRANTED"]
    approver.post(f"/v1/leases/{lease_id}/revoke", {"reason": "disputed"}, format="json")
    both = selectors.lease_entries(tenant=acme, lease_id=lease_id)
    assert [e.kind for e in both] == ["LEASE_GRANTED", "LEASE_REVOKED"]
    assert both == list(ledger_selectors.iter_entries(log=acme.log))
    assert selectors.lease_entries(tenant=globex, lease_id=lease_id) == []
    assert selectors.lease_entries(tenant=acme, lease_id="lease_unknown") == []


def test_a_lease_with_its_tenant_loads_as_the_orm_loads_it(acme: Tenant, globex: Tenant) -> None:
    """The dispatch's lease read is one written-out statement: every field of the lease (its
    JSON limits, instants) and of its tenant as the ORM loads them, in no other tenant."""
    approver = client_for(acme, "approver", "alice@acme.example")
    granted = approver.post("/v1/leases", grant_body(currency="EUR"), format="json").json()
    loaded = selectors.lease_with_tenant(tenant=acme, lease_id=granted["lease_id"])
    assert loaded is not None
    orm = Lease.objects.select_related("tenant").get(pk=loaded.pk)

    def values(instance: Model) -> dict[str, Any]:
        return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}

    assert values(loaded) == values(orm)
    assert values(loaded.tenant) == values(orm.tenant)
    assert loaded.limits == {"amount_cents": 2000}
    assert selectors.lease_with_tenant(tenant=globex, lease_id=granted["lease_id"]) is None
    assert selectors.lease_with_tenant(tenant=acme, lease_id="lease_unknown") is None
