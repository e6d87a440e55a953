"""Writes of the notary's own records. Keyword-only, one transaction each."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gate_client.leases import Lease as LeaseTerms
from ledger.core.entries import EntryKind
from ledger.services import append_entry, ensure_log
from notary.models import ApiKey, Lease, Role, Target, Tenant, Tier

TOKEN_PREFIX = "ik"
_SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


class NotaryInputError(ValueError):
    """The request is refused as given; nothing was written."""


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@transaction.atomic(durable=True)
def tenant_create(*, slug: str, name: str) -> Tenant:
    if not _SLUG.fullmatch(slug):
        raise NotaryInputError(f"slug {slug!r}: 1-63 of a-z, 0-9 and '-', not at either end")
    if Tenant.objects.filter(slug=slug).exists():
        raise NotaryInputError(f"tenant {slug!r} exists already")
    log = ensure_log(origin=f"{settings.NOTARY_ORIGIN}/{slug}")
    return Tenant.objects.create(slug=slug, name=name, log=log)


@transaction.atomic(durable=True)
def api_key_issue(*, tenant: Tenant, role: str, holder: str, label: str = "") -> tuple[ApiKey, str]:
    """A new key and its token, `ik_<key id>_<secret>`: the only time the secret exists."""
    if role not in Role.values:
        raise NotaryInputError(f"role {role!r}: one of {', '.join(Role.values)}")
    if not holder.strip():
        raise NotaryInputError("a key needs a holder: the person or system that uses it")
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        tenant=tenant,
        key_id=key_id,
        secret_sha256=secret_digest(secret),
        role=role,
        holder=holder.strip(),
        label=label,
    )
    return api_key, f"{TOKEN_PREFIX}_{key_id}_{secret}"


@transaction.atomic(durable=True)
def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    """Revoke now; revoking twice keeps the first time."""
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    api_key.refresh_from_db()
    return api_key


@transaction.atomic(durable=True)
def target_register(
    *,
    tenant: Tenant,
    name: str,
    tier: int,
    queryable: bool,
    max_inflight: timedelta,
    key_window: timedelta | None = None,
    evidence_window: timedelta | None = None,
    lookup_url: str = "",
) -> Target:
    """Declare a target. What it allows is a claim the gate's guarantees rest on, so claims
    that contradict each other are refused rather than stored."""
    if not _SLUG.fullmatch(name):
        raise NotaryInputError(f"target name {name!r}: 1-63 of a-z, 0-9 and '-'")
    if tier not in Tier.values:
        raise NotaryInputError(f"tier {tier!r}: 1, 2 or 3")
    if tier == Tier.LOOKUP and not queryable:
        raise NotaryInputError(
            "a tier-2 target is one that can be looked up: queryable must be true"
        )
    if key_window is not None and tier != Tier.DEDUPES:
        raise NotaryInputError("only a tier-1 target dedupes on a key, so only it has a key window")
    for label, window in (
        ("max_inflight", max_inflight),
        ("key_window", key_window),
        ("evidence_window", evidence_window),
    ):
        if window is not None and window <= timedelta(0):
            raise NotaryInputError(f"{label} must be positive")
    if Target.objects.filter(tenant=tenant, name=name).exists():
        raise NotaryInputError(f"target {name!r} exists already")
    return Target.objects.create(
        tenant=tenant,
        name=name,
        tier=tier,
        queryable=queryable,
        key_window=key_window,
        max_inflight=max_inflight,
        evidence_window=evidence_window,
        lookup_url=lookup_url,
    )


@transaction.atomic(durable=True)
def lease_grant(
    *,
    tenant: Tenant,
    approver: ApiKey,
    case_id: str,
    action: str,
    expires_at: datetime,
    requested_by: str,
    limits: Mapping[str, int] | None = None,
    payload_hash: str | None = None,
) -> Lease:
    """Grant a lease, recording LEASE_GRANTED in the tenant's ledger in the same transaction."""
    if approver.role != Role.APPROVER or approver.tenant_id != tenant.pk:
        raise NotaryInputError("only an approver key of this tenant grants leases")
    if requested_by.strip() == approver.holder:
        raise NotaryInputError(f"{approver.holder} requested this and cannot also approve it")
    if not case_id or not action:
        raise NotaryInputError("a lease needs a case_id and an action")
    if expires_at <= timezone.now():
        raise NotaryInputError("expires_at must be in the future")
    limits = dict(limits or {})
    for name, maximum in limits.items():
        if not isinstance(maximum, int) or isinstance(maximum, bool) or maximum < 0:
            raise NotaryInputError(f"limit {name!r} must be a non-negative integer")
    if payload_hash is not None and not re.fullmatch(r"[0-9a-f]{64}", payload_hash):
        raise NotaryInputError("payload_hash must be 64 lowercase hex digits (SHA-256)")
    terms = LeaseTerms(
        lease_id=f"lease_{secrets.token_hex(12)}",
        case_id=case_id,
        action=action,
        expires_at=expires_at,
        granted_by=approver.holder,
        limits=limits,
        payload_hash=payload_hash,
    )
    entry = append_entry(
        log=tenant.log,
        kind=EntryKind.LEASE_GRANTED,
        body={**terms.body(), "requested_by": requested_by.strip()},
    )
    return Lease.objects.create(
        tenant=tenant,
        lease_id=terms.lease_id,
        case_id=case_id,
        action=action,
        limits=limits,
        payload_hash=payload_hash or "",
        expires_at=expires_at,
        requested_by=requested_by.strip(),
        granted_by=approver.holder,
        granted_seq=entry.seq,
    )


@transaction.atomic(durable=True)
def lease_revoke(*, tenant: Tenant, lease_id: str, by: str, reason: str) -> Lease:
    """Revoke now, recording LEASE_REVOKED; revoking a revoked lease changes nothing."""
    lease = Lease.objects.select_for_update().filter(tenant=tenant, lease_id=lease_id).first()
    if lease is None:
        raise NotaryInputError(f"no lease {lease_id!r}")
    if lease.revoked_at is not None:
        return lease
    entry = append_entry(
        log=tenant.log,
        kind=EntryKind.LEASE_REVOKED,
        body={"lease_id": lease_id, "by": by, "reason": reason},
    )
    lease.revoked_at, lease.revoked_by, lease.revoked_seq = entry.created_at, by, entry.seq
    lease.save(update_fields=["revoked_at", "revoked_by", "revoked_seq"])
    return lease
