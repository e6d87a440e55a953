"""Leases granted from AP2 mandates, and the keys whose mandates a tenant trusts. The protocol
rules (verification, what a mandate lets a lease approve, whether it may be granted again) are
gate_client.mandates'; this module stores the keys and writes the grant, with the mandate as
received in LEASE_GRANTED."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from gate_client.mandates import (
    Mandate,
    MandateError,
    MandateTerms,
    TrustedKey,
    mandate_terms,
    regrant_refusal,
    trusted_key,
    verify_mandate,
)
from ledger.selectors import get_entry
from ledger.services import lock_log
from notary.errors import NotaryConflict, NotaryForbidden, NotaryInputError, NotaryNotFound
from notary.identities import canonical_holder
from notary.models import ApiKey, Lease, MandateKey, Tenant
from notary.services import check_approver, lease_grant_named, lease_terms


@transaction.atomic(durable=True)
def mandate_key_trust(
    *, tenant: Tenant, jwk: Mapping[str, Any], role: str, holder: str
) -> MandateKey:
    """Trust a public key's mandates (role user) or checkout JWTs (role merchant) for this
    tenant's grants. Trusting a key trusted already, in the same role, changes nothing."""
    try:
        key = trusted_key(jwk, role=role, holder=canonical_holder(holder))
    except MandateError as exc:
        raise NotaryInputError(exc.detail) from exc
    known = MandateKey.objects.filter(tenant=tenant, key_id=key.key_id).first()
    if known is not None:
        if known.role != key.role or known.revoked_at is not None:
            raise NotaryInputError(
                f"key {key.key_id} is trusted as a {known.role} key already, or was revoked"
            )
        return known
    return MandateKey.objects.create(
        tenant=tenant, key_id=key.key_id, role=key.role, holder=key.holder, jwk=dict(key.jwk)
    )


@transaction.atomic(durable=True)
def mandate_key_revoke(*, tenant: Tenant, key_id: str) -> MandateKey:
    """Trust no new mandate of this key; the leases granted on its mandates stand, as any
    lease does until revoked itself."""
    key = MandateKey.objects.select_for_update().filter(tenant=tenant, key_id=key_id).first()
    if key is None:
        raise NotaryNotFound(f"no mandate key {key_id!r}")
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


@transaction.atomic(durable=True)
def lease_grant_from_mandate(
    *,
    tenant: Tenant,
    approver: ApiKey,
    mandate: Any,
    action: str,
    requested_by: str,
    case_id: str = "",
    case_class: str | None = None,
    case_pattern: str | None = None,
    expires_at: datetime | None = None,
    amount_field: str = "amount",
) -> Lease:
    """Grant a lease whose money terms are a verified AP2 mandate's: an open Payment Mandate's
    amount range bounds each effect's `amount_field` and names the currency, and its totals
    (payment.budget, agent_recurrence's max_occurrences, one payment without recurrence) are a
    budget of every agent key together over the lease's life; a closed Checkout Mandate's
    checkout approves exactly its payload, once. The approver names the action, the cases
    and the agent; the lease ends at the mandate's end, or earlier at `expires_at`. The
    mandate, as received, goes into LEASE_GRANTED with the keys that verified it and its hash.

    A mandate is spent in the ledger: a one-payment or Checkout Mandate granted before is
    refused NotaryConflict mandate_spent; a later lease of an open one shares the earlier
    leases' budget pool, its window reaching back to the first grant."""
    check_approver(tenant=tenant, approver=approver)
    now = timezone.now()
    try:
        verified = verify_mandate(mandate, _trusted_keys(tenant), now=now)
    except MandateError as exc:
        raise _refusal(exc) from exc
    try:
        bound = mandate_terms(verified, amount_field=amount_field)
    except MandateError as exc:
        raise _refusal(exc) from exc
    ends = [end for end in (expires_at, bound.expires_at) if end is not None]
    if not ends:
        raise NotaryInputError("the mandate states no end: give the lease an expires_at")
    bound = replace(bound, expires_at=min(ends))
    first_granted = _first_grant(tenant=tenant, mandate=verified, terms=bound)
    budget = bound.budget(granted_at=first_granted or now)
    terms = lease_terms(
        case_id=case_id,
        action=action,
        expires_at=min(ends),
        limits={amount_field: bound.amount_limit} if bound.amount_limit is not None else {},
        payload_hash=bound.payload_hash,
        currency=bound.currency,
        case_class=case_class,
        case_pattern=case_pattern,
        budgets=[budget.body()] if budget is not None else [],
    )
    return lease_grant_named(
        tenant=tenant,
        approver=approver,
        terms=terms,
        requested_by=requested_by,
        provenance={"mandate": verified.evidence()},
        mandate_hash=verified.mandate_hash,
        mandate_once=bound.single_use,
    )


def _first_grant(*, tenant: Tenant, mandate: Mandate, terms: MandateTerms) -> datetime | None:
    """When the mandate was first granted, if it was and may be granted again; else
    NotaryConflict mandate_spent. Decided under the log lock, held by the grant's transaction
    until its LEASE_GRANTED is in, so two grants of one mandate at once cannot both find none
    before them (Lease.mandate_once's unique constraint is the second line)."""
    lock_log(log=tenant.log)
    earlier = list(
        Lease.objects.filter(tenant=tenant, mandate_hash=mandate.mandate_hash)
        .order_by("granted_seq")
        .values_list("lease_id", "granted_seq")
    )
    refusal = regrant_refusal(mandate, terms, [lease_id for lease_id, _ in earlier])
    if refusal is not None:
        raise NotaryConflict("mandate_spent", refusal, lease_id=earlier[0][0])
    if not earlier:
        return None
    return get_entry(log=tenant.log, seq=earlier[0][1]).created_at


def _refusal(exc: MandateError) -> Exception:
    """The API's answer to each way gate_client.mandates refuses a mandate at a grant: an
    unreadable one is bad input (400); a well-formed one that cannot be the evidence, 403."""
    match exc.code:
        case "invalid_mandate":
            return NotaryInputError(f"mandate: {exc.detail}")
        case "untrusted_signature":
            return NotaryForbidden("untrusted_signature", exc.detail)
        case "mandate_expired":
            return NotaryForbidden("mandate_expired", exc.detail)
        case "mandate_binding":
            return NotaryForbidden("mandate_binding", exc.detail)
        case _:  # unresolved_constraint: what remains of verify_mandate's refusals
            return NotaryForbidden("unresolved_constraint", exc.detail)


def _trusted_keys(tenant: Tenant) -> list[TrustedKey]:
    keys = MandateKey.objects.filter(tenant=tenant, revoked_at__isnull=True).order_by("pk")
    return [trusted_key(k.jwk, role=k.role, holder=k.holder) for k in keys]
