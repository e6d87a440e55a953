"""Writes of the notary's own records. Keyword-only, one transaction each."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.services import ensure_log
from notary.models import ApiKey, Role, Target, Tenant, Tier

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
def api_key_issue(*, tenant: Tenant, role: str, label: str = "") -> tuple[ApiKey, str]:
    """A new key and its token, `ik_<key id>_<secret>`: the only time the secret exists."""
    if role not in Role.values:
        raise NotaryInputError(f"role {role!r}: one of {', '.join(Role.values)}")
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        tenant=tenant, key_id=key_id, secret_sha256=secret_digest(secret), role=role, label=label
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
