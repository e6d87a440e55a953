"""Identities come from keys: the requester of a lease is the holder of the key it was asked
under, the approver the holder of the key that grants it, both in canonical form, so no way of
typing a name makes an approver someone else."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from rest_framework.test import APIClient

from gate_client.proposal import Proposal
from ledger import selectors as ledger_selectors
from notary import services
from notary.errors import NotaryInputError
from notary.models import ApiKey, Lease, LeaseRequest, Tenant
from testkit.factories import CENTS_MONEY, client_for

pytestmark = pytest.mark.django_db

APPROVER = "approver@acme.example"
ZERO_WIDTH_SPACE = "\u200b"
CYRILLIC_A = "\u0430"
# Every way of typing the approver's name that the old check, an exact string comparison of a
# field the caller types, let through as someone else.
SPELLINGS = [
    "APPROVER@ACME.EXAMPLE",
    "Approver@Acme.Example",
    f"mailto:{APPROVER}",
    "\uff41pprover@acme.example",  # a full-width a
    f" {APPROVER} ",
]
# Spellings a reader cannot tell from the approver's that are refused as holders outright.
DECEPTIVE = [
    f"appr{ZERO_WIDTH_SPACE}over@acme.example",
    f"{CYRILLIC_A}pprover@acme.example",
    "approver@acme.examp1e",  # a one for the l: the approver's skeleton
]


def terms(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "case_id": "case_4711",
        "action": "refund",
        "expires_at": (timezone.now() + timedelta(hours=1)).isoformat(),
        "limits": {"amount_cents": 2000},
    }
    body.update(changes)
    return body


def entries(tenant: Tenant) -> list[Any]:
    return list(ledger_selectors.iter_entries(log=tenant.log))


@pytest.fixture
def approver(acme: Tenant) -> APIClient:
    return client_for(acme, "approver", APPROVER)


def test_a_request_is_made_under_an_agent_key_and_granted_by_another_holder(
    acme: Tenant, approver: APIClient
) -> None:
    agent = client_for(acme, "agent", "Refund-Bot")
    asked = agent.post("/v1/lease-requests", terms(), format="json")
    assert asked.status_code == 201, asked.json()
    request = asked.json()
    assert request["requested_by"] == "refund-bot"  # the key's holder, in canonical form
    assert request["lease_id"] is None
    assert entries(acme) == [], "a request is no authority: nothing in the ledger yet"

    granted = approver.post("/v1/leases", {"request_id": request["request_id"]}, format="json")
    assert granted.status_code == 201, granted.json()
    lease = granted.json()
    assert (lease["requested_by"], lease["granted_by"]) == ("refund-bot", APPROVER)
    assert (lease["case_id"], lease["limits"]) == ("case_4711", {"amount_cents": 2000})
    (entry,) = entries(acme)
    assert entry.body_value()["requested_by"] == "refund-bot"
    assert entry.body_value()["request_id"] == request["request_id"]
    assert entry.body_value()["requested_key"] == request["requested_key"]

    again = approver.post("/v1/leases", {"request_id": request["request_id"]}, format="json")
    assert again.status_code == 409
    assert again.json()["error"] == "already_granted"
    assert len(entries(acme)) == 1


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_an_approver_cannot_grant_a_request_made_under_a_key_they_hold(
    acme: Tenant, approver: APIClient, spelling: str
) -> None:
    own_agent = client_for(acme, "agent", spelling)  # the approver's own agent key
    asked = own_agent.post("/v1/lease-requests", terms(), format="json")
    assert asked.status_code == 201
    assert asked.json()["requested_by"] == APPROVER
    refused = approver.post("/v1/leases", {"request_id": asked.json()["request_id"]}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid"
    assert "cannot also approve it" in refused.json()["detail"]
    assert entries(acme) == []
    assert not Lease.objects.exists()
    assert LeaseRequest.objects.get().lease is None


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_typed_requester_is_the_holder_of_a_key_compared_in_canonical_form(
    acme: Tenant, approver: APIClient, spelling: str
) -> None:
    """The grant naming a requester (the API as it was): the approver's own name, however
    written, is refused, and so is a name that holds no agent key of the tenant."""
    client_for(acme, "agent", APPROVER)  # the approver also runs an agent
    refused = approver.post("/v1/leases", terms(requested_by=spelling), format="json")
    assert refused.status_code == 400, refused.json()
    assert refused.json()["error"] == "invalid"
    assert "cannot also approve it" in refused.json()["detail"]

    nobody = approver.post("/v1/leases", terms(requested_by="bob@acme.example"), format="json")
    assert nobody.status_code == 400
    assert "holds no live agent key" in nobody.json()["detail"]
    assert entries(acme) == []

    client_for(acme, "agent", "Bob@Acme.Example")
    granted = approver.post("/v1/leases", terms(requested_by="BOB@acme.example"), format="json")
    assert granted.status_code == 201, granted.json()
    assert granted.json()["requested_by"] == "bob@acme.example"


@pytest.mark.parametrize("spelling", DECEPTIVE)
def test_a_typed_requester_that_only_looks_like_a_name_is_refused(
    acme: Tenant, approver: APIClient, spelling: str
) -> None:
    client_for(acme, "agent", "someone-else")
    refused = approver.post("/v1/leases", terms(requested_by=spelling), format="json")
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid"
    assert entries(acme) == []


@pytest.mark.parametrize("spelling", DECEPTIVE)
def test_holders_are_refused_when_a_reader_cannot_tell_them_apart(
    acme: Tenant, approver: APIClient, spelling: str
) -> None:
    with pytest.raises(NotaryInputError, match="holder"):
        services.api_key_issue(tenant=acme, role="agent", holder=spelling)
    with pytest.raises(CommandError, match="holder"):
        call_command("issue_api_key", "--tenant", "acme", "--role", "agent", "--holder", spelling)
    assert list(ApiKey.objects.values_list("holder", flat=True)) == [APPROVER]


def test_mixed_script_and_invisible_holders_are_refused_in_any_tenant(acme: Tenant) -> None:
    for holder in (f"{CYRILLIC_A}lice", f"al{ZERO_WIDTH_SPACE}ice", "ali\tce", "\u200b"):
        with pytest.raises(NotaryInputError, match="holder"):
            services.api_key_issue(tenant=acme, role="agent", holder=holder)
    assert not ApiKey.objects.exists()


def test_holders_are_stored_and_shown_in_canonical_form(acme: Tenant) -> None:
    out = io.StringIO()
    call_command(
        "issue_api_key", "--tenant", "acme", "--role", "agent", "--holder", "Refund-Bot", stdout=out
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip()}")
    whoami = client.get("/v1/whoami")
    assert whoami.status_code == 200
    assert whoami.json()["holder"] == "refund-bot"
    assert ApiKey.objects.get().holder == "refund-bot"


def test_only_an_agent_requests_and_only_an_approver_grants(
    acme: Tenant, globex: Tenant, approver: APIClient
) -> None:
    for role in ("approver", "service", "auditor"):
        refused = client_for(acme, role, f"{role}-key").post(
            "/v1/lease-requests", terms(), format="json"
        )
        assert refused.status_code == 403
        assert refused.json()["error"] == "permission_denied"
    asked = client_for(acme, "agent", "refund-bot").post(
        "/v1/lease-requests", terms(), format="json"
    )
    request_id = asked.json()["request_id"]
    agent_grant = client_for(acme, "agent", "other-bot").post(
        "/v1/leases", {"request_id": request_id}, format="json"
    )
    assert agent_grant.status_code == 403
    outsider = client_for(globex, "approver", "eve@globex.example")
    missing = outsider.post("/v1/leases", {"request_id": request_id}, format="json")
    assert missing.status_code == 404
    assert set(missing.json()) == {"error", "detail"}
    mixed = approver.post(
        "/v1/leases", {"request_id": request_id, "case_id": "other"}, format="json"
    )
    assert mixed.status_code == 400
    assert entries(acme) == [] and entries(globex) == []


@pytest.mark.parametrize(
    ("changes", "field_or_message"),
    [
        ({"case_id": ""}, "case_id"),
        ({"expires_at": "tomorrow"}, "expires_at"),
        ({"limits": {"amount_cents": -5}}, "limits"),
        ({"expires_at": (timezone.now() - timedelta(hours=1)).isoformat()}, "in the future"),
        ({"payload_hash": "xyz"}, "64 lowercase hex"),
    ],
)
def test_a_bad_request_is_a_400_and_stores_nothing(
    acme: Tenant, changes: dict[str, Any], field_or_message: str
) -> None:
    agent = client_for(acme, "agent", "refund-bot")
    reply = agent.post("/v1/lease-requests", terms(**changes), format="json")
    assert reply.status_code == 400
    assert reply.json()["error"] == "invalid"
    assert field_or_message in str(reply.json()["detail"])
    assert not LeaseRequest.objects.exists()


def test_only_the_requesters_keys_dispatch_under_a_lease(acme: Tenant, approver: APIClient) -> None:
    """The lease is granted to whoever asked: another agent of the tenant may propose the same
    effect, but its dispatch is refused and nothing is written; a second key of the requester
    (a rotated key) dispatches."""
    asked = client_for(acme, "agent", "refund-bot").post(
        "/v1/lease-requests", terms(), format="json"
    )
    granted = approver.post("/v1/leases", {"request_id": asked.json()["request_id"]}, format="json")
    lease_id = granted.json()["lease_id"]
    proposal = Proposal(
        case_id="case_4711",
        target="refunds",
        action="refund",
        payload={"amount_cents": 1500},
        lease_id=lease_id,
        tenant=acme.slug,
    )
    request = {
        "effect_id": proposal.effect_id,
        "proposal": proposal.proposed_body([]),
        "dispatch": {"premises": []},
    }
    services.target_register(
        tenant=acme,
        name="refunds",
        tier=1,
        queryable=False,
        max_inflight=timedelta(seconds=1),
        money=CENTS_MONEY,
    )

    other = client_for(acme, "agent", "mail-bot").post("/v1/effects", request, format="json")
    assert other.status_code == 201, other.json()
    assert other.json()["dispatched"] is None
    assert other.json()["dispatch_refused"]["reason"] == "lease_scope"
    assert "requested by refund-bot, not mail-bot" in other.json()["dispatch_refused"]["detail"]
    before = entries(acme)
    again = client_for(acme, "agent", "mail-bot").post(
        f"/v1/effects/{proposal.effect_id}/dispatch",
        {"attempt": 1, "premises": [], "recovery": False},
        format="json",
    )
    assert again.status_code == 409 and again.json()["reason"] == "lease_scope", again.json()
    assert entries(acme) == before

    rotated = client_for(acme, "agent", "Refund-Bot").post(
        f"/v1/effects/{proposal.effect_id}/dispatch",
        {"attempt": 1, "premises": [], "recovery": False},
        format="json",
    )
    assert rotated.status_code == 201, rotated.json()
