"""Tenants' things made through the notary's services: API clients for a role, targets, leases,
and effects as an agent leaves them, for tests that start where the agent stopped."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from rest_framework.test import APIClient

from gate_client.proposal import Proposal
from notary import services
from notary.models import DEFAULT_REVIEW_SLA, ApiKey, Lease, Target, Tenant

INSTANT = timedelta(milliseconds=1)


def register(
    tenant: Tenant,
    name: str,
    *,
    tier: int = 3,
    max_inflight: timedelta = INSTANT,
    evidence_window: timedelta | None = None,
    lookup_url: str = "",
    queryable: bool | None = None,
    key_window: timedelta | None = None,
    review_sla: timedelta = DEFAULT_REVIEW_SLA,
    money: Mapping[str, Any] | None = None,
) -> Target:
    """A target of `tier`, queryable when it is tier 2 unless `queryable` says otherwise;
    `money` as POST /v1/targets takes it (gate_client.money)."""
    return services.target_register(
        tenant=tenant,
        name=name,
        tier=tier,
        queryable=tier == 2 if queryable is None else queryable,
        max_inflight=max_inflight,
        key_window=key_window,
        evidence_window=evidence_window,
        lookup_url=lookup_url,
        review_sla=review_sla,
        money=money,
    )


def tenant_with_approver(slug: str, name: str, *, holder: str = "finance") -> tuple[Tenant, ApiKey]:
    """A new tenant and one approver key of it, to grant many leases with (see `leased`)."""
    tenant = services.tenant_create(slug=slug, name=name)
    return tenant, services.api_key_issue(tenant=tenant, role="approver", holder=holder)[0]


def leased(
    tenant: Tenant,
    case_id: str,
    action: str,
    *,
    requested_by: str = "bot",
    approver: ApiKey | None = None,
    expires_at: datetime | None = None,
    limits: Mapping[str, int] | None = None,
) -> Lease:
    """A lease on `action` for `case_id`, an hour long unless `expires_at`, requested under an
    agent key held by `requested_by` (one of the tenant's, else a new one) and granted by
    `approver` or by a new approver key."""
    if approver is None:
        approver = services.api_key_issue(tenant=tenant, role="approver", holder="alice")[0]
    requester = ApiKey.objects.filter(
        tenant=tenant, role="agent", holder=requested_by, revoked_at__isnull=True
    ).first()
    if requester is None:
        requester = services.api_key_issue(tenant=tenant, role="agent", holder=requested_by)[0]
    asked = services.lease_request(
        tenant=tenant,
        requester=requester,
        case_id=case_id,
        action=action,
        expires_at=expires_at or timezone.now() + timedelta(hours=1),
        limits=limits,
    )
    return services.lease_request_grant(
        tenant=tenant, approver=approver, request_id=asked.request_id
    )


def proposed(tenant: Tenant, target: str, case_id: str) -> str:
    """An effect proposed under a live lease and not dispatched yet; its id."""
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
    return proposal.effect_id


def dispatched(tenant: Tenant, target: str, case_id: str) -> str:
    """An effect proposed and dispatched under a live lease; what happened next is unknown."""
    effect_id = proposed(tenant, target, case_id)
    services.effect_dispatch(
        tenant=tenant, effect_id=effect_id, attempt=1, premises=[], recovery=False
    )
    time.sleep(0.005)  # past the 1 ms in-flight window
    return effect_id


def settled(
    tenant: Tenant, case_id: str, target: str, payload: Mapping[str, Any], outcome: str
) -> str:
    """An effect of `payload` under a new lease, proposed, dispatched and ended in `outcome`
    (COMMITTED or AMBIGUOUS) as the gate would record it; its id."""
    lease = leased(tenant, case_id, "refund")
    proposal = Proposal(
        case_id, target, "refund", dict(payload), lease.lease_id, tenant=tenant.slug
    )
    effect_id = proposal.effect_id
    services.effect_propose(tenant=tenant, effect_id=effect_id, proposal=proposal.proposed_body([]))
    services.effect_dispatch(
        tenant=tenant, effect_id=effect_id, attempt=1, premises=[], recovery=False
    )
    body = (
        {"state": outcome, "attempt": 1, "result_ref": f"re_{case_id}", "recheck": None}
        if outcome == "COMMITTED"
        else {}
    )
    services.effect_record_outcome(tenant=tenant, effect_id=effect_id, kind=outcome, body=body)
    return effect_id


def token_for(tenant: Tenant, role: str, holder: str, *, targets: Sequence[str] = ()) -> str:
    """The bearer token of a new key of `role` held by `holder` (a service key attesting for
    `targets`)."""
    return services.api_key_issue(tenant=tenant, role=role, holder=holder, targets=targets)[1]


def client_for(tenant: Tenant, role: str, holder: str, *, targets: Sequence[str] = ()) -> APIClient:
    """An API client authenticated with a new key of `role` held by `holder` (a service key
    attesting for `targets`)."""
    client = APIClient()
    token = token_for(tenant, role, holder, targets=targets)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


# The money of a payments target whose payloads say {"amount_cents": ..., "currency": ...}, and
# of a Stripe refunds target ({"amount": ...}), as POST /v1/targets takes them.
CENTS_MONEY = {"amount_field": "amount_cents", "currency_field": "currency"}
STRIPE_MONEY = {"amount_field": "amount", "currency_field": "currency"}
