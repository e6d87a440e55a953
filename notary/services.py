"""Writes of the notary's own records. Keyword-only, one transaction each."""

from __future__ import annotations

import hashlib
import re
import secrets

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.services import ensure_log
from notary.models import ApiKey, Role, Tenant

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
