"""Tenants' things made through the notary's services: API clients for a role, targets, leases,
and effects as an agent leaves them, for tests that start where the agent stopped."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from gate_client.proposal import Proposal
from notary import services
from notary.models import Lease, Target, Tenant

INSTANT = timedelta(milliseconds=1)


def register(
    tenant: Tenant,
    name: str,
    *,
    tier: int = 3,
    max_inflight: timedelta = INSTANT,
    evidence_window: timedelta | None = None,
    lookup_url: str = "",
) -> Target:
    return services.target_register(
        tenant=tenant,
        name=name,
        tier=tier,
        queryable=tier == 2,
        max_inflight=max_inflight,
        evidence_window=evidence_window,
        lookup_url=lookup_url,
    )


def leased(tenant: Tenant, case_id: str, action: str, *, requested_by: str = "bot") -> Lease:
    """A lease on `action` for `case_id`, an hour long, granted by a new approver key."""
    approver = services.api_key_issue(tenant=tenant, role="approver", holder="alice")[0]
    return services.lease_grant(
        tenant=tenant,
        approver=approver,
        case_id=case_id,
        action=action,
        expires_at=timezone.now() + timedelta(hours=1),
        requested_by=requested_by,
    )


def dispatched(tenant: Tenant, target: str, case_id: str) -> str:
    """An effect proposed and dispatched under a live lease; what happened next is unknown."""
    lease = leased(tenant, case_id, "email", requested_by="mail-bot")
    proposal = Proposal(
        case_id=case_id,
        target=target,
        action="email",
        payload={"to": "customer@example.com"},
        lease_id=lease.lease_id,
        tenant=tenant.slug,
    )
    services.effect_propose(
        tenant=tenant, effect_id=proposal.effect_id, proposal=proposal.proposed_body([])
    )
    services.effect_dispatch(
        tenant=tenant, effect_id=proposal.effect_id, attempt=1, premises=[], recovery=False
    )
    time.sleep(0.005)  # past the 1 ms in-flight window
    return proposal.effect_id


def client_for(tenant: Tenant, role: str, holder: str) -> APIClient:
    """An API client authenticated with a new key of `role` held by `holder`."""
    _, token = services.api_key_issue(tenant=tenant, role=role, holder=holder)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client
