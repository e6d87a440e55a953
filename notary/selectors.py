"""Reads of the notary's own records."""

from __future__ import annotations

import hmac

from rest_framework.exceptions import NotFound

from notary.models import ApiKey, Lease, Tenant
from notary.services import TOKEN_PREFIX, secret_digest


def api_key_for_token(*, token: str) -> ApiKey | None:
    """The live key this bearer token belongs to, or None; the secret is compared in constant
    time, and an unknown key id costs the same digest as a known one."""
    prefix, _, rest = token.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != TOKEN_PREFIX or not key_id or not secret:
        return None
    api_key = (
        ApiKey.objects.select_related("tenant")
        .filter(key_id=key_id, revoked_at__isnull=True)
        .first()
    )
    expected = api_key.secret_sha256 if api_key is not None else "0" * 64
    if not hmac.compare_digest(expected, secret_digest(secret)) or api_key is None:
        return None
    return api_key


def lease_get(*, tenant: Tenant, lease_id: str) -> Lease:
    """The tenant's lease; another tenant's lease does not exist for this caller."""
    lease = Lease.objects.filter(tenant=tenant, lease_id=lease_id).first()
    if lease is None:
        raise NotFound(f"no lease {lease_id!r}")
    return lease
