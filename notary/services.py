"""Writes of the notary's own records. Keyword-only, one transaction each."""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email
from django.db import connection, transaction
from django.utils import timezone

from gate_client import holds
from gate_client.authorization import (
    DispatchRequest,
    Held,
    Refuse,
    authorize,
    proposal_refusal,
    terms_mismatch,
)
from gate_client.budgets import (
    Budget,
    budget_problem,
    parse_budgets,
)
from gate_client.holds import DEFAULT_HOLD_SCOPE, Hold, HoldScope, hold_for
from gate_client.http_target import HttpTarget
from gate_client.ids import effect_id_for
from gate_client.leases import Lease as LeaseTerms
from gate_client.leases import LeaseState
from gate_client.money import MINOR, MoneyDeclaration
from gate_client.protocol import (
    AGENT_VERDICT_KINDS,
    COMMITTED_STATES,
    Answer,
    Ask,
    Facts,
    HeldOnEvidence,
    Record,
    Settled,
    State,
    TargetDeclaration,
    Wait,
    admit,
    agent_outcome_refusal,
    attestation_refusal,
    decide,
    evidence_answer,
    intent_refusal,
    last_attempt,
    queued_by,
    settle_on_evidence,
    silence_broken,
    standing,
)
from gate_client.receipts import ReceiptError
from gate_client.targets import Tier as GateTier
from gate_client.targets import Unknown
from ledger.core.canonical import MAX_SAFE_INTEGER, CanonicalJSONError, canonical_json, check_depth
from ledger.core.entries import Entry as LedgerEntry
from ledger.core.entries import EntryKind
from ledger.selectors import (
    effect_entries,
    effects_entries,
    iter_effect_histories,
)
from ledger.services import (
    Appending,
    NewEntry,
    append_entries,
    append_entry,
    ensure_log,
    in_log_order,
    lock_log,
)
from notary.errors import NotaryConflict, NotaryForbidden, NotaryInputError, NotaryNotFound
from notary.groups import AUDITORS, FINANCE_REVIEWERS, ensure_review_groups
from notary.identities import canonical_holder, same_holder
from notary.models import (
    DEFAULT_MAX_LEASE_AMOUNT_CENTS,
    DEFAULT_MAX_LEASE_DURATION,
    DEFAULT_REVIEW_SLA,
    WAITING_FOR_A_PERSON,
    ApiKey,
    Effect,
    Lease,
    LeaseRequest,
    ReviewAssignment,
    ReviewEvent,
    ReviewNotice,
    ReviewNotifications,
    Role,
    Target,
    Tenant,
    Tier,
    waits_for_a_person,
)
from notary.projection import effect_fields
from notary.selectors import (
    budget_spent,
    holding_candidates,
    lease_with_tenant,
    target_registered,
)
from notary.tokens import TOKEN_PREFIX, secret_digest

_SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# Target names as the adapters name them by default (resend_email, stripe_refunds).
_TARGET_NAME = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?")


@transaction.atomic(durable=True)
def tenant_create(
    *,
    slug: str,
    name: str,
    max_lease_amount_cents: int = DEFAULT_MAX_LEASE_AMOUNT_CENTS,
    max_lease_duration: timedelta = DEFAULT_MAX_LEASE_DURATION,
    hold_scope: str = DEFAULT_HOLD_SCOPE,
) -> Tenant:
    if not _SLUG.fullmatch(slug):
        raise NotaryInputError(f"slug {slug!r}: 1-63 of a-z, 0-9 and '-', not at either end")
    grant_policy_check(
        max_lease_amount_cents=max_lease_amount_cents, max_lease_duration=max_lease_duration
    )
    scope = hold_scope_check(hold_scope)
    if Tenant.objects.filter(slug=slug).exists():
        raise NotaryInputError(f"tenant {slug!r} exists already")
    log = ensure_log(origin=f"{settings.NOTARY_ORIGIN}/{slug}")
    return Tenant.objects.create(
        slug=slug,
        name=name,
        log=log,
        max_lease_amount_cents=max_lease_amount_cents,
        max_lease_duration=max_lease_duration,
        hold_scope=scope,
    )


@transaction.atomic  # not durable: the admin saves inside its own transaction
def tenant_policy_set(
    *,
    tenant: Tenant,
    max_lease_amount_cents: int,
    max_lease_duration: timedelta,
    hold_scope: str | None = None,
) -> Tenant:
    """Change what the tenant's approvers may grant; leases granted before stand as granted.
    `hold_scope` (None: as it is) is which new effects a waiting one holds from the next
    dispatch on (gate_client.holds); a HELD entry written before stays in the ledger."""
    grant_policy_check(
        max_lease_amount_cents=max_lease_amount_cents, max_lease_duration=max_lease_duration
    )
    scoped = {} if hold_scope is None else {"hold_scope": hold_scope_check(hold_scope)}
    Tenant.objects.filter(pk=tenant.pk).update(
        max_lease_amount_cents=max_lease_amount_cents,
        max_lease_duration=max_lease_duration,
        **scoped,
    )
    tenant.refresh_from_db()
    return tenant


def hold_scope_check(hold_scope: str) -> HoldScope:
    """A hold scope by its name (gate_client.holds.HoldScope); writes nothing."""
    try:
        return HoldScope(hold_scope)
    except ValueError:
        names = ", ".join(scope.value for scope in HoldScope)
        raise NotaryInputError(f"hold_scope {hold_scope!r}: one of {names}") from None


def grant_policy_check(*, max_lease_amount_cents: int, max_lease_duration: timedelta) -> None:
    """A grant policy's bounds are positive (and fit the database); writes nothing."""
    if (
        not isinstance(max_lease_amount_cents, int)
        or isinstance(max_lease_amount_cents, bool)
        or not 0 < max_lease_amount_cents <= _MAX_BIGINT
    ):
        raise NotaryInputError("max_lease_amount_cents must be a positive integer")
    if not timedelta(0) < max_lease_duration <= _MAX_LEASE_DURATION:
        raise NotaryInputError("max_lease_duration must be positive and at most 100 years")


_MAX_BIGINT = 2**63 - 1
_MAX_LEASE_DURATION = timedelta(days=36525)


def api_key_scope(
    *, tenant: Tenant, role: str, holder: str, targets: Sequence[str] = ()
) -> tuple[str, list[Target]]:
    """Check a key before it is issued: the holder's canonical form (notary.identities), and
    the targets a service key may attest for, all of this tenant. Writes nothing."""
    if role not in Role.values:
        raise NotaryInputError(f"role {role!r}: one of {', '.join(Role.values)}")
    canonical = canonical_holder(holder)
    for other in ApiKey.objects.filter(tenant=tenant).values_list("holder", flat=True).distinct():
        if other != canonical and same_holder(other, canonical):
            raise NotaryInputError(
                f"holder {holder!r} reads as {other!r}, who holds a key already: name them "
                "the same way, or tell them apart"
            )
    if targets and role != Role.SERVICE:
        raise NotaryInputError("only a service key names targets: the ones it attests for")
    found = list(Target.objects.filter(tenant=tenant, name__in=set(targets)))
    missing = sorted(set(targets) - {target.name for target in found})
    if missing:
        raise NotaryInputError(f"no target {', '.join(map(repr, missing))}: register it first")
    return canonical, found


@transaction.atomic  # not durable: the admin issues keys inside its own transaction
def api_key_issue(
    *, tenant: Tenant, role: str, holder: str, label: str = "", targets: Sequence[str] = ()
) -> tuple[ApiKey, str]:
    """A new key and its token, `ik_<key id>_<secret>`: the only time the secret exists. The
    holder is stored in canonical form; a service key attests only for `targets`."""
    canonical, scope = api_key_scope(tenant=tenant, role=role, holder=holder, targets=targets)
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        tenant=tenant,
        key_id=key_id,
        secret_sha256=secret_digest(secret),
        role=role,
        holder=canonical,
        label=label,
    )
    api_key.targets.set(scope)
    return api_key, f"{TOKEN_PREFIX}_{key_id}_{secret}"


@transaction.atomic(durable=True)
def api_key_revoke(*, api_key: ApiKey) -> bool:
    """Revoke now, refreshing `api_key`; revoking twice keeps the first time. True if this call
    revoked it, so a caller counts only what it changed."""
    live = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True)
    revoked = live.update(revoked_at=timezone.now()) == 1
    api_key.refresh_from_db()
    return revoked


# --- people in the admin ----------------------------------------------------------------------

# Every staff user sees every tenant's records in the admin: there is no per-tenant scope.


@transaction.atomic(durable=True)
def reviewer_create(*, username: str, email: str, password: str | None) -> User:
    """A finance reviewer: a staff user who may decide AMBIGUOUS effects and revoke leases."""
    return _staff_create(group=FINANCE_REVIEWERS, username=username, email=email, password=password)


@transaction.atomic(durable=True)
def auditor_create(*, username: str, email: str, password: str | None) -> User:
    """An auditor: a staff user who reads everything in the admin and decides nothing."""
    return _staff_create(group=AUDITORS, username=username, email=email, password=password)


def _staff_create(*, group: str, username: str, email: str, password: str | None) -> User:
    """A staff user (never a superuser: the group is all they may do) in `group`. No password
    gives an unusable one, for its holder to set with `changepassword`. Every check runs before
    the first write."""
    if password == "":
        raise NotaryInputError("an empty password: give none for an unusable one")
    user = User(username=username, email=email, is_staff=True)
    try:
        user.full_clean(exclude=["password"])
    except ValidationError as refused:
        raise NotaryInputError(
            "; ".join(f"{field}: {' '.join(why)}" for field, why in refused.message_dict.items())
        ) from refused
    if not user.email:
        raise NotaryInputError("email: an email address is required")
    # The username is who a decision is recorded as `by` in the ledger: one that reads as
    # another's (case, look-alike letters) would make the record ambiguous.
    for other in User.objects.values_list("username", flat=True):
        if same_holder(other, user.username):
            raise NotaryInputError(f"username {username!r} reads as {other!r}, who exists already")
    if password is None:
        user.set_unusable_password()
    else:
        try:
            validate_password(password, user)
        except ValidationError as refused:
            raise NotaryInputError(f"password: {' '.join(refused.messages)}") from refused
        user.set_password(password)
    user.save()
    ensure_review_groups()  # the group as notary.groups defines it now, not as at the last migrate
    user.groups.add(Group.objects.get(name=group))
    return user


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
    attests_before_acting: bool = False,
    lookup_needs_key: bool = False,
    lookup_url: str = "",
    review_sla: timedelta = DEFAULT_REVIEW_SLA,
    money: Mapping[str, Any] | None = None,
) -> Target:
    """Declare a target. What it allows is a claim the gate's guarantees rest on, so claims
    that contradict each other are refused rather than stored. `money`: which payload fields
    hold the money its effects move (gate_client.money's MoneyDeclaration, as a body)."""
    declared = _money_declaration(money)
    if not _TARGET_NAME.fullmatch(name):
        raise NotaryInputError(f"target name {name!r}: 1-63 of a-z, 0-9, '_' and '-'")
    if tier not in Tier.values:
        raise NotaryInputError(f"tier {tier!r}: 1, 2 or 3")
    if tier == Tier.LOOKUP and not queryable:
        raise NotaryInputError(
            "a tier-2 target is one that can be looked up: queryable must be true"
        )
    if key_window is not None and tier != Tier.DEDUPES:
        raise NotaryInputError("only a tier-1 target dedupes on a key, so only it has a key window")
    if lookup_needs_key and not (queryable and key_window is not None):
        raise NotaryInputError("lookup_needs_key is for a queryable target with a key window")
    for label, window in (
        ("max_inflight", max_inflight),
        ("key_window", key_window),
        ("evidence_window", evidence_window),
        ("review_sla", review_sla),
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
        attests_before_acting=attests_before_acting,
        lookup_needs_key=lookup_needs_key,
        lookup_url=lookup_url,
        review_sla=review_sla,
        money_amount_field=declared.amount_field if declared is not None else "",
        money_currency_field=(declared.currency_field or "") if declared is not None else "",
        money_currency=(declared.currency or "") if declared is not None else "",
    )


def _money_declaration(money: Mapping[str, Any] | None) -> MoneyDeclaration | None:
    if money is None:
        return None
    given = {"currency_field": None, "currency": None, "unit": MINOR, **money}
    try:
        return MoneyDeclaration.from_body(given)
    except (ValueError, TypeError, KeyError) as exc:
        raise NotaryInputError(str(exc)) from exc


@dataclass(frozen=True)
class LeaseTermsChecked:
    case_id: str  # "" for a standing lease, which names a case_class or a case_pattern
    action: str
    expires_at: datetime
    limits: dict[str, int]
    payload_hash: str | None
    currency: str | None
    case_class: str | None = None
    case_pattern: str | None = None
    budgets: tuple[Budget, ...] = ()


_CURRENCY = re.compile(r"[A-Z]{3}")


def lease_terms(
    *,
    case_id: str,
    action: str,
    expires_at: datetime,
    limits: Mapping[str, int] | None,
    payload_hash: str | None,
    currency: str | None,
    case_class: str | None = None,
    case_pattern: str | None = None,
    budgets: Any = None,
) -> LeaseTermsChecked:
    """What a lease covers, checked as a request and a grant both take it: one case, or, for a
    standing lease, every case of a class or matching a pattern."""
    scopes = {"case_id": case_id, "case_class": case_class, "case_pattern": case_pattern}
    named = [name for name, value in scopes.items() if value]
    if len(named) != 1 or not action:
        raise NotaryInputError(
            "a lease needs an action and exactly one of case_id, case_class and case_pattern"
        )
    _check_text(named[0], scopes[named[0]], limit=MAX_CASE_ID)
    _check_text("action", action, limit=MAX_ACTION)
    if expires_at <= timezone.now():
        raise NotaryInputError("expires_at must be in the future")
    checked = dict(limits or {})
    _check_limits(checked)
    if payload_hash is not None and not re.fullmatch(r"[0-9a-f]{64}", payload_hash):
        raise NotaryInputError("payload_hash must be 64 lowercase hex digits (SHA-256)")
    money = currency.upper() if isinstance(currency, str) and currency else None
    if money is not None and not _CURRENCY.fullmatch(money):
        raise NotaryInputError("currency: three letters of ISO 4217, e.g. USD")
    try:
        rolling = parse_budgets(budgets or [])
    except ValueError as exc:
        raise NotaryInputError(str(exc)) from exc
    problem = budget_problem(rolling, currency=money)
    if problem is not None:
        raise NotaryInputError(problem)
    return LeaseTermsChecked(
        case_id or "",
        action,
        expires_at,
        checked,
        payload_hash,
        money,
        case_class or None,
        case_pattern or None,
        rolling,
    )


@transaction.atomic(durable=True)
def lease_request(
    *,
    tenant: Tenant,
    requester: ApiKey,
    case_id: str = "",
    action: str,
    expires_at: datetime,
    limits: Mapping[str, int] | None = None,
    payload_hash: str | None = None,
    currency: str | None = None,
    case_class: str | None = None,
    case_pattern: str | None = None,
    budgets: Sequence[Mapping[str, Any]] | None = None,
) -> LeaseRequest:
    """Ask for a lease under an agent key: its holder is the requester, whatever anyone types."""
    if requester.role != Role.AGENT or requester.tenant_id != tenant.pk:
        raise NotaryInputError("only an agent key of this tenant requests leases")
    terms = lease_terms(
        case_id=case_id,
        action=action,
        expires_at=expires_at,
        limits=limits,
        payload_hash=payload_hash,
        currency=currency,
        case_class=case_class,
        case_pattern=case_pattern,
        budgets=list(budgets or []),
    )
    return LeaseRequest.objects.create(
        tenant=tenant,
        request_id=f"lreq_{secrets.token_hex(12)}",
        case_id=terms.case_id,
        action=terms.action,
        limits=terms.limits,
        payload_hash=terms.payload_hash or "",
        currency=terms.currency or "",
        case_class=terms.case_class or "",
        case_pattern=terms.case_pattern or "",
        budgets=[b.body() for b in terms.budgets],
        expires_at=terms.expires_at,
        requested_key=requester,
        requested_by=requester.holder,
    )


@transaction.atomic(durable=True)
def lease_request_grant(*, tenant: Tenant, approver: ApiKey, request_id: str) -> Lease:
    """Grant a lease request on its own terms. Its requester is the holder of the key it was
    made under; an approver holding a key of that holder may not grant it. Once only."""
    check_approver(tenant=tenant, approver=approver)
    request = (
        LeaseRequest.objects.select_for_update()
        .select_related("requested_key")
        .filter(tenant=tenant, request_id=request_id)
        .first()
    )
    if request is None:
        raise NotaryNotFound(f"no lease request {request_id!r}")
    granted = request.lease
    if granted is not None:
        raise NotaryConflict(
            "already_granted", f"{request_id} was granted already", lease_id=granted.lease_id
        )
    terms = lease_terms(
        case_id=request.case_id,
        action=request.action,
        expires_at=request.expires_at,
        limits=request.limits,
        payload_hash=request.payload_hash or None,
        currency=request.currency or None,
        case_class=request.case_class or None,
        case_pattern=request.case_pattern or None,
        budgets=request.budgets,
    )
    lease = _grant(
        tenant=tenant,
        approver=approver,
        terms=terms,
        requester=request.requested_key.holder,
        provenance={
            "request_id": request.request_id,
            "requested_key": request.requested_key.key_id,
        },
    )
    request.lease = lease
    request.save(update_fields=["lease"])
    return lease


@transaction.atomic(durable=True)
def lease_grant(
    *,
    tenant: Tenant,
    approver: ApiKey,
    case_id: str = "",
    action: str,
    expires_at: datetime,
    requested_by: str,
    limits: Mapping[str, int] | None = None,
    payload_hash: str | None = None,
    currency: str | None = None,
    case_class: str | None = None,
    case_pattern: str | None = None,
    budgets: Sequence[Mapping[str, Any]] | None = None,
) -> Lease:
    """Grant a lease, recording LEASE_GRANTED in the tenant's ledger in the same transaction.
    `requested_by` names the holder of an agent key of the tenant, compared in canonical form
    (notary.identities); a request made under that key (lease_request) is the stronger way."""
    check_approver(tenant=tenant, approver=approver)
    terms = lease_terms(
        case_id=case_id,
        action=action,
        expires_at=expires_at,
        limits=limits,
        payload_hash=payload_hash,
        currency=currency,
        case_class=case_class,
        case_pattern=case_pattern,
        budgets=list(budgets or []),
    )
    return lease_grant_named(
        tenant=tenant, approver=approver, terms=terms, requested_by=requested_by
    )


@transaction.atomic
def lease_grant_named(
    *,
    tenant: Tenant,
    approver: ApiKey,
    terms: LeaseTermsChecked,
    requested_by: str,
    provenance: Mapping[str, Any] | None = None,
    mandate_hash: str = "",
    mandate_once: bool = False,
) -> Lease:
    """Grant checked `terms` (lease_terms) to the holder `requested_by` names, with what the
    grant rests on (`provenance`, e.g. an AP2 mandate, named by `mandate_hash`, granted only
    once if `mandate_once`) in LEASE_GRANTED: the one grant of named terms, whichever way the
    terms were made."""
    named = canonical_holder(requested_by)
    if same_holder(named, approver.holder):
        raise NotaryInputError(f"{approver.holder} requested this and cannot also approve it")
    requester = _requesting_holder(tenant=tenant, named=named)
    return _grant(
        tenant=tenant,
        approver=approver,
        terms=terms,
        requester=requester,
        provenance=provenance,
        mandate_hash=mandate_hash,
        mandate_once=mandate_once,
    )


def check_approver(*, tenant: Tenant, approver: ApiKey) -> None:
    if approver.role != Role.APPROVER or approver.tenant_id != tenant.pk:
        raise NotaryInputError("only an approver key of this tenant grants leases")


def _requesting_holder(*, tenant: Tenant, named: str) -> str:
    """The holder of the tenant's live agent key that `named` names."""
    holders = ApiKey.objects.filter(
        tenant=tenant, role=Role.AGENT, revoked_at__isnull=True
    ).values_list("holder", flat=True)
    for holder in holders.iterator():
        if same_holder(holder, named):
            return holder
    raise NotaryInputError(
        f"requested_by {named!r} holds no live agent key of this tenant: the requester is the "
        "holder of the key that asks (POST /v1/lease-requests)"
    )


def _grant(
    *,
    tenant: Tenant,
    approver: ApiKey,
    terms: LeaseTermsChecked,
    requester: str,
    provenance: Mapping[str, Any] | None = None,
    mandate_hash: str = "",
    mandate_once: bool = False,
) -> Lease:
    if same_holder(requester, approver.holder):
        raise NotaryInputError(f"{approver.holder} requested this and cannot also approve it")
    _check_grant_policy(tenant=tenant, terms=terms)
    granted = LeaseTerms(
        lease_id=f"lease_{secrets.token_hex(12)}",
        case_id=terms.case_id,
        action=terms.action,
        expires_at=terms.expires_at,
        granted_by=approver.holder,
        limits=terms.limits,
        payload_hash=terms.payload_hash,
        currency=terms.currency,
        case_class=terms.case_class,
        case_pattern=terms.case_pattern,
        budgets=terms.budgets,
    )
    entry = append_entry(
        log=tenant.log,
        kind=EntryKind.LEASE_GRANTED,
        body={**granted.body(), "requested_by": requester, **(provenance or {})},
    )
    return Lease.objects.create(
        tenant=tenant,
        lease_id=granted.lease_id,
        case_id=terms.case_id,
        action=terms.action,
        limits=terms.limits,
        payload_hash=terms.payload_hash or "",
        currency=terms.currency or "",
        case_class=terms.case_class or "",
        case_pattern=terms.case_pattern or "",
        budgets=[b.body() for b in terms.budgets],
        expires_at=terms.expires_at,
        requested_by=requester,
        granted_by=approver.holder,
        granted_seq=entry.seq,
        mandate_hash=mandate_hash,
        mandate_once=mandate_once,
    )


def _check_grant_policy(*, tenant: Tenant, terms: LeaseTermsChecked) -> None:
    """The tenant's policy, as stored now, bounds the amount and the duration of a grant: every
    limit, since a limit bounds the amount its target declares (gate_client.money)."""
    policy = Tenant.objects.values("max_lease_amount_cents", "max_lease_duration").get(pk=tenant.pk)
    for name, amount in terms.limits.items():
        if amount > policy["max_lease_amount_cents"]:
            raise NotaryForbidden(
                "beyond_policy",
                f"{name} {amount} is more than this tenant lets an approver grant "
                f"({policy['max_lease_amount_cents']})",
            )
    longest: timedelta = policy["max_lease_duration"]
    if terms.expires_at - timezone.now() > longest:
        raise NotaryForbidden(
            "beyond_policy",
            f"a lease runs at most {longest.total_seconds():g} s under this tenant's policy",
        )


@dataclass(frozen=True)
class Revocation:
    lease: Lease  # as the call leaves it
    seq: int | None  # the LEASE_REVOKED this call wrote; None: the lease was revoked before


@transaction.atomic(durable=True)
def lease_revoke(*, tenant: Tenant, lease_id: str, by: str, reason: str) -> Revocation:
    """Revoke now, recording LEASE_REVOKED with who and why; revoking a revoked lease changes
    nothing. The reason is what a reader of the ledger has to go by, so it is never blank."""
    reason = reason.strip()
    _check_text("a revocation's reason", reason, limit=MAX_REVOCATION_REASON, lines=True)
    lease = Lease.objects.select_for_update().filter(tenant=tenant, lease_id=lease_id).first()
    if lease is None:
        raise NotaryInputError(f"no lease {lease_id!r}")
    if lease.revoked_at is not None:
        return Revocation(lease, seq=None)
    entry = append_entry(
        log=tenant.log,
        kind=EntryKind.LEASE_REVOKED,
        body={"lease_id": lease_id, "by": by, "reason": reason},
    )
    lease.revoked_at, lease.revoked_by, lease.revoked_seq = entry.created_at, by, entry.seq
    lease.revoked_reason = reason
    lease.save(update_fields=["revoked_at", "revoked_by", "revoked_seq", "revoked_reason"])
    return Revocation(lease, seq=entry.seq)


# --- bounds on what is stored -----------------------------------------------------------------

# Every string the API stores is bounded by the column it lands in (Effect, Lease), and every
# list by a count no honest caller reaches; all of it is checked before anything is written.
MAX_CASE_ID = 200
MAX_ACTION = 100
MAX_LEASE_ID = 100
MAX_TARGET_NAME = 63
MAX_PREMISES = 100
MAX_PREMISE_NAME = 200
MAX_LIMITS = 32
MAX_LIMIT_NAME = 100
MAX_RESULT_REF = 255  # Effect.result_ref
MAX_FAILURE_CODE = 90  # FAILED:<code> is the Effect's state, at most 100 characters
MAX_REVOCATION_REASON = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tabs, line breaks pass


def _check_text(
    label: str, value: Any, *, limit: int, empty: bool = False, lines: bool = False
) -> None:
    """A string of at most `limit` characters (non-empty unless `empty`) that a text column
    holds: no control character (PostgreSQL text cannot hold NUL) and no lone surrogate
    (UTF-8 cannot). `lines`: a person's prose, which may hold tabs and line breaks (a textarea
    sends CRLF)."""
    if not isinstance(value, str) or not (value or empty):
        raise NotaryInputError(f"{label} must be a non-empty string")
    if len(value) > limit:
        raise NotaryInputError(f"{label} is longer than {limit} characters")
    control = _CONTROL_BUT_LINES if lines else _CONTROL
    if control.search(value) or not _encodable(value):
        raise NotaryInputError(f"{label} holds a control character or a lone surrogate")


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_limits(limits: Mapping[str, Any]) -> None:
    """A lease's limits bound amounts: each a positive integer that a double holds exactly (so
    a payload's amount is checked against a maximum and a minimum of 1, never only a maximum)."""
    if len(limits) > MAX_LIMITS:
        raise NotaryInputError(f"a lease has at most {MAX_LIMITS} limits")
    for name, maximum in limits.items():
        _check_text("a limit's name", name, limit=MAX_LIMIT_NAME)
        if (
            not isinstance(maximum, int)
            or isinstance(maximum, bool)
            or not 1 <= maximum <= MAX_SAFE_INTEGER
        ):
            raise NotaryInputError(
                f"limit {name!r} must be a positive integer, at most {MAX_SAFE_INTEGER}"
            )


# --- effects ---------------------------------------------------------------------------------

PROPOSAL_KEYS = frozenset(
    {"case_id", "target", "action", "tenant", "lease_id", "payload", "payload_hash", "premises"}
)
PROPOSAL_KEYS_REFUSAL = (
    f"a proposal has exactly the keys {', '.join(sorted(PROPOSAL_KEYS))}, and optionally "
    "case_class and declaration"
)


@dataclass(frozen=True)
class Proposed:
    entries: list[LedgerEntry]  # the effect's entries after the call
    created: bool  # this call recorded the PROPOSED
    effect: Effect  # its row as committed, projected from `entries` (not saved again)
    dispatched: LedgerEntry | None = None  # DISPATCHED attempt 1, recorded by this call
    refusal: NotaryConflict | None = None  # why the lease refused that dispatch


def effect_propose(
    *,
    tenant: Tenant,
    effect_id: str,
    proposal: Mapping[str, Any],
    dispatch_premises: Sequence[Mapping[str, Any]] | None = None,
    dispatcher: ApiKey | None = None,
) -> Proposed:
    """Record PROPOSED unless the effect has one. Under the log lock, so two agents proposing
    at once agree on which payload stands.

    With `dispatch_premises` (all holding), this is also the dispatch of attempt 1, in the same
    transaction, when the standing proposal is this one and nothing was dispatched or settled
    yet: the common path's one round trip before the call. A lease that does not cover it is
    reported in `refusal`, with the PROPOSED kept and nothing dispatched. A held one
    (gate_client.holds) keeps the PROPOSED and its HELD, dispatches nothing, and is refused
    NotaryConflict held once they are committed."""
    proposed, hold = _propose(
        tenant=tenant,
        effect_id=effect_id,
        proposal=proposal,
        dispatch_premises=dispatch_premises,
        dispatcher=dispatcher,
    )
    if hold is not None:
        raise _held(hold)
    return proposed


def _propose(
    *,
    tenant: Tenant,
    effect_id: str,
    proposal: Mapping[str, Any],
    dispatch_premises: Sequence[Mapping[str, Any]] | None,
    dispatcher: ApiKey | None,
) -> tuple[Proposed, Hold | None]:
    declared = _check_proposal(tenant=tenant, effect_id=effect_id, proposal=proposal)
    # The PROPOSED carries the declaration it was checked against, so the ledger alone says
    # how its money reads; a proposal that carries none gets the record's.
    proposal = {**proposal, "declaration": declared.body()}
    if dispatch_premises is not None:
        _check_holding(dispatch_premises)
    return in_log_order(
        log=tenant.log,
        work=partial(
            _propose_in_order,
            tenant=tenant,
            effect_id=effect_id,
            proposal=proposal,
            declared=declared,
            dispatch_premises=dispatch_premises,
            dispatcher=dispatcher,
        ),
    )


def _propose_in_order(
    now: datetime,
    *,
    tenant: Tenant,
    effect_id: str,
    proposal: Mapping[str, Any],
    declared: TargetDeclaration,
    dispatch_premises: Sequence[Mapping[str, Any]] | None,
    dispatcher: ApiKey | None,
) -> tuple[Proposed, Hold | None]:
    history = effect_entries(log=tenant.log, effect_id=effect_id)
    created = not any(e.kind == EntryKind.PROPOSED for e in history)
    standing_proposal = proposal if created else _proposed_body(history)
    items = [NewEntry(EntryKind.PROPOSED, dict(proposal), effect_id)] if created else []
    refusal, hold = None, None
    dispatching = (
        dispatch_premises is not None
        and standing_proposal["payload_hash"] == proposal["payload_hash"]
        and standing(history).state is None
        and last_attempt(history) == 0
    )
    lease = (
        lease_with_tenant(tenant=tenant, lease_id=standing_proposal["lease_id"])
        if created or dispatching
        else None
    )
    if created and lease is not None:
        # A money term the target cannot meet refuses the proposal before anything is written,
        # not every dispatch after it. An unknown lease is the dispatch's to refuse.
        mismatch = terms_mismatch(_lease_terms(lease), declared)
        if mismatch is not None:
            raise NotaryInputError(f"proposal.lease_id: {mismatch}")
    if dispatching:
        assert dispatch_premises is not None
        try:
            checked = _checked_dispatch(
                tenant,
                effect_id,
                standing_proposal,
                1,
                dispatch_premises,
                False,
                now,
                dispatcher,
                history=history,
                lease=lease,
            )
        except NotaryConflict as refused:
            refusal = refused
        else:
            if isinstance(checked, Hold):
                hold = checked
                items += _held_entry(effect_id, history, hold)
            else:
                items.append(checked)
    if not items:
        effect = Effect(tenant=tenant, effect_id=effect_id, **effect_fields(history))
        return Proposed(history, created, effect, refusal=refusal), hold
    rows = append_entries(log=tenant.log, items=items, created_at=now)
    appended = [row.as_ledger_entry() for row in rows]
    fields = _project_effect(tenant=tenant, history=history + appended, created=created)
    effect = Effect(tenant=tenant, effect_id=effect_id, **fields)
    dispatched = next((e for e in appended if e.kind == EntryKind.DISPATCHED), None)
    return Proposed(history + appended, created, effect, dispatched, refusal), hold


def effect_dispatch(
    *,
    tenant: Tenant,
    effect_id: str,
    attempt: int,
    premises: Sequence[Mapping[str, Any]],
    recovery: bool,
    dispatcher: ApiKey | None = None,
) -> LedgerEntry:
    """Check the lease and record DISPATCHED attempt `attempt`, in one transaction under the log
    lock and stamped with the instant of the check, so ledger order alone shows whether the
    lease was live when the effect fired. Scope comes from the PROPOSED entry, not the caller;
    the agent key dispatching (`dispatcher`, every API call's) must be the requester's. A new
    effect held (gate_client.holds) records HELD instead, once per hold, and is refused
    NotaryConflict held once that is committed."""
    dispatched = _dispatch(
        tenant=tenant,
        effect_id=effect_id,
        attempt=attempt,
        premises=premises,
        recovery=recovery,
        dispatcher=dispatcher,
    )
    if isinstance(dispatched, Hold):
        raise _held(dispatched)
    return dispatched


def _dispatch(
    *,
    tenant: Tenant,
    effect_id: str,
    attempt: int,
    premises: Sequence[Mapping[str, Any]],
    recovery: bool,
    dispatcher: ApiKey | None,
) -> LedgerEntry | Hold:
    _check_holding(premises)
    return in_log_order(
        log=tenant.log,
        work=partial(
            _dispatch_in_order,
            tenant=tenant,
            effect_id=effect_id,
            attempt=attempt,
            premises=premises,
            recovery=recovery,
            dispatcher=dispatcher,
        ),
    )


def _dispatch_in_order(
    now: datetime,
    *,
    tenant: Tenant,
    effect_id: str,
    attempt: int,
    premises: Sequence[Mapping[str, Any]],
    recovery: bool,
    dispatcher: ApiKey | None,
) -> LedgerEntry | Hold:
    history = _history_of(tenant=tenant, effect_id=effect_id)
    current = last_attempt(history)
    if standing(history).state is not None:
        raise NotaryConflict("already_settled", f"{effect_id} has a verdict", current=current)
    if attempt != current + 1:
        raise NotaryConflict(
            "attempt_taken", f"attempt {attempt} asked, {current} recorded", current=current
        )
    proposed = _proposed_body(history)
    lease = lease_with_tenant(tenant=tenant, lease_id=proposed["lease_id"])
    checked = _checked_dispatch(
        tenant,
        effect_id,
        proposed,
        attempt,
        premises,
        recovery,
        now,
        dispatcher,
        history=history,
        lease=lease,
    )
    if isinstance(checked, Hold):
        held = _held_entry(effect_id, history, checked)
        if held:  # else recorded so before
            [row] = append_entries(log=tenant.log, items=held, created_at=now)
            _project_effect(tenant=tenant, history=[*history, row.as_ledger_entry()])
        return checked
    [row] = append_entries(log=tenant.log, items=[checked], created_at=now)
    entry = row.as_ledger_entry()
    _project_effect(tenant=tenant, history=[*history, entry])
    return entry


def _checked_dispatch(
    tenant: Tenant,
    effect_id: str,
    proposed: Mapping[str, Any],
    attempt: int,
    premises: Sequence[Mapping[str, Any]],
    recovery: bool,
    now: datetime,
    dispatcher: ApiKey | None,
    *,
    history: Sequence[LedgerEntry],
    lease: Lease | None,
) -> NewEntry | Hold:
    """The DISPATCHED entry, if the lease covers the proposal at `now` (the caller holds the
    log lock and stamps the entry with `now`) and `dispatcher` holds it; else NotaryConflict
    lease_refused; or the hold on it, if its own evidence (its entries, `history`) or another
    effect of its case waits for a person (gate_client.holds, by the tenant's hold_scope as
    stored now). A first dispatch under a budgeted lease spends, by the dispatching key.
    `lease`: the proposal's lease with its tenant, as the caller read it under the lock."""
    request = DispatchRequest.of_proposal(effect_id, proposed, attempt, premises, recovery)
    requester = _requester_refusal(lease, dispatcher)
    if requester is not None:
        raise NotaryConflict("lease_refused", requester[1], reason=requester[0])
    # The tenant's hold scope as stored now: lease_with_tenant read it under the log lock.
    scope = HoldScope((lease.tenant if lease is not None else tenant).hold_scope)
    spender = dispatcher.key_id if dispatcher is not None else ""
    decision = authorize(
        request=request,
        lease=_lease_state(lease),
        now=now,
        spender=spender,
        spent_for=lambda budget: budget_spent(
            tenant=tenant, lease_id=request.lease_id, budget=budget, now=now, spender=spender
        ),
        hold=lambda: hold_for(
            scope,
            effect_id=effect_id,
            proposed=proposed,
            attempt=attempt,
            history=history,
            candidates=holding_candidates(
                tenant=tenant, scope=scope, proposed=proposed, effect_id=effect_id
            ),
        ),
    )
    if isinstance(decision, Refuse):
        raise NotaryConflict("lease_refused", decision.detail, reason=decision.reason)
    if isinstance(decision, Held):
        return decision.hold
    return NewEntry(kind=EntryKind.DISPATCHED, body=dict(decision.body), effect_id=effect_id)


def _held_entry(effect_id: str, history: Sequence[LedgerEntry], hold: Hold) -> list[NewEntry]:
    """The HELD entry, unless the effect records this hold already (a looping agent)."""
    if holds.recorded(history, hold):
        return []
    return [NewEntry(EntryKind.HELD, hold.body(), effect_id)]


def _held(hold: Hold) -> NotaryConflict:
    """The 409 of a held dispatch: its HELD is recorded (committed), nothing is dispatched."""
    return NotaryConflict("held", hold.detail, held_by=hold.held_by)


def effect_record_outcome(
    *, tenant: Tenant, effect_id: str, kind: str, body: Mapping[str, Any]
) -> tuple[LedgerEntry, bool, list[LedgerEntry]]:
    """Record how the effect ended, as the agent learned it; return the entry that stands,
    whether this call recorded it, and the effect's entries now. The protocol's precedence
    decides (protocol.admit): a final verdict stands, so a retried request and two recovering
    agents converge on one; an AMBIGUOUS one gives way to the agent's own late answer; an
    answer that contradicts what stands is kept as evidence, so the contradiction shows."""
    _check_outcome(kind=kind, body=body)
    return in_log_order(
        log=tenant.log,
        work=partial(
            _record_outcome_in_order, tenant=tenant, effect_id=effect_id, kind=kind, body=body
        ),
    )


def _record_outcome_in_order(
    now: datetime, *, tenant: Tenant, effect_id: str, kind: str, body: Mapping[str, Any]
) -> tuple[LedgerEntry, bool, list[LedgerEntry]]:
    history = _history_of(tenant=tenant, effect_id=effect_id)
    refused = agent_outcome_refusal(history, kind, body)
    if refused is not None:
        raise NotaryInputError(refused)
    broken = silence_broken(history, kind, body)
    if broken is not None:
        raise NotaryConflict("evidence_arrived", broken)
    admission = admit(history, kind, body)
    if admission.action == "stands":
        assert admission.standing is not None
        return admission.standing, False, history
    if admission.action == "record_as_evidence":
        assert admission.evidence is not None and admission.standing is not None
        item = NewEntry(EntryKind.OBSERVED, dict(admission.evidence), effect_id)
        [row] = append_entries(log=tenant.log, items=[item], created_at=now)
        history = [*history, row.as_ledger_entry()]
        _project_effect(tenant=tenant, history=history)
        return admission.standing, False, history
    entry = append_entry(
        log=tenant.log, kind=kind, body=dict(body), effect_id=effect_id
    ).as_ledger_entry()
    history = [*history, entry]
    try:
        _project_effect(tenant=tenant, history=history)
    except ReceiptError as exc:
        raise NotaryInputError(f"{kind} does not follow from the effect's entries: {exc}") from exc
    return entry, True, history


# No savepoint: its callers (ingestion, attestation_record) are transactions that end on
# any error from it, so one would only cost two round trips per piece of evidence.
@transaction.atomic(savepoint=False)
def effect_observe(
    *, tenant: Tenant, effect_id: str, evidence: Mapping[str, Any]
) -> tuple[LedgerEntry, str]:
    """Record evidence of how an effect went (a provider's webhook, a service's attestation) as
    OBSERVED, and settle the effect by it as the protocol says (protocol.settle_on_evidence):
    an effect dispatched and not finally settled, AMBIGUOUS included, becomes
    COMMITTED_ON_EVIDENCE on evidence it was done and FAILED on evidence it was not. A final
    verdict is never moved: evidence at odds with it marks the effect contradicted. Joins the
    caller's transaction (ingestion records what it did in the same one). Returns the OBSERVED
    entry and what it did."""
    [observed] = effects_observe(tenant=tenant, observations=[(effect_id, evidence)])
    return observed


@transaction.atomic(savepoint=False)
def effects_observe(
    *, tenant: Tenant, observations: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[tuple[LedgerEntry, str]]:
    """effect_observe for several (effect id, evidence) of the tenant's, in order, each doing
    what it would do after those before it (several on one effect included), at a batch's cost:
    the histories read in one query, the entries appended in one statement, each effect's row
    written once. All or nothing, in the caller's transaction, like effect_observe."""
    for _, evidence in observations:
        if evidence.get("outcome") not in ("performed", "not_performed", "other"):
            raise NotaryInputError("evidence.outcome: performed, not_performed or other")
    now = lock_log(log=tenant.log)
    histories = effects_entries(log=tenant.log, effect_ids={e for e, _ in observations})
    for effect_id, _ in observations:
        if not any(e.kind == EntryKind.PROPOSED for e in histories.get(effect_id, ())):
            raise NotaryNotFound(f"no effect {effect_id!r}")
    return _observe(tenant=tenant, histories=histories, observations=observations, now=now)


def _observe(
    *,
    tenant: Tenant,
    histories: Mapping[str, Sequence[LedgerEntry]],
    observations: Sequence[tuple[str, Mapping[str, Any]]],
    now: datetime,
) -> list[tuple[LedgerEntry, str]]:
    """Each piece of evidence as OBSERVED, and the verdict it settles, sealed after everything
    before it (the protocol's rules see the entries of the evidence before it), then all
    written at once. Each effect's row is computed after each of its entries, so the review
    notices are those one call after another would add, and written once, as it ends."""
    appending = Appending(log=tenant.log, created_at=now)
    current = {effect_id: list(history) for effect_id, history in histories.items()}
    rows = _effect_rows(tenant=tenant, effect_ids=current)
    before = {effect_id: {"state": s, "contradicted": c} for effect_id, (_, s, c) in rows.items()}
    after: dict[str, dict[str, Any]] = {}
    notices: list[tuple[str, ReviewEvent, str]] = []
    done: list[tuple[LedgerEntry, str]] = []
    for effect_id, evidence in observations:
        history = current[effect_id]
        observed = appending.add(NewEntry(EntryKind.OBSERVED, dict(evidence), effect_id))
        history.append(observed)
        verdict = settle_on_evidence(history)
        if verdict is not None:
            history.append(appending.add(NewEntry(verdict.kind, _by_notary(verdict), effect_id)))
            settled = (
                "committed_on_evidence"
                if verdict.kind == EntryKind.COMMITTED
                else "failed_on_evidence"
            )
        else:
            settled = "contradicts" if standing(history).contradictions else "recorded"
        fields = effect_fields(history)
        stood = after.get(effect_id, before.get(effect_id))
        due = _review_event(before=stood, after=fields, history=history)
        if due is not None:
            notices.append((effect_id, *due))
        after[effect_id] = fields
        done.append((observed, settled))
    appending.write()
    _effects_update({rows[e][0]: fields for e, fields in after.items() if e in rows})
    for effect_id, event, cause in notices:
        _review_notice_add(tenant=tenant, effect_id=effect_id, event=event, cause=cause)
    return done


def _effect_rows(*, tenant: Tenant, effect_ids: Iterable[str]) -> dict[str, tuple[int, str, bool]]:
    """The rows of these effects as they stand: (pk, state, contradicted) by effect id."""
    rows = Effect.objects.filter(tenant=tenant, effect_id__in=list(effect_ids))
    return {
        e: (pk, state, c)
        for e, pk, state, c in rows.values_list("effect_id", "pk", "state", "contradicted")
    }


def _effects_update(rows: Mapping[int, Mapping[str, Any]]) -> None:
    """Write each effect's projected fields, by pk: one UPDATE sent for all rows (executemany),
    each value prepared by its field as the ORM would; bulk_update's CASE per field and row
    costs more to build than the statements cost to run."""
    if not rows:
        return
    names = next(iter(rows.values()))
    fields = [field for field in Effect._meta.concrete_fields if field.name in names]
    assignments = ", ".join(f'"{field.column}" = %s' for field in fields)
    statement = f'UPDATE "{Effect._meta.db_table}" SET {assignments} WHERE id = %s'
    params = [
        [*(field.get_db_prep_save(row[field.name], connection) for field in fields), pk]
        for pk, row in rows.items()
    ]
    with connection.cursor() as cursor:
        cursor.executemany(statement, params)


def _by_notary(verdict: Record) -> dict[str, Any]:
    """A verdict the notary reached itself says so; an agent may never write this."""
    body = dict(verdict.body)
    if isinstance(body.get("recheck"), Mapping):
        body["recheck"] = {"by": "notary", **body["recheck"]}
    else:
        body["by"] = "notary"
    return body


@transaction.atomic(durable=True)
def effect_resolve(
    *, tenant: Tenant, effect_id: str, happened: bool, reason: str, by: str
) -> LedgerEntry:
    """A person's decision on what the notary cannot know: RESOLVED, naming who decided and
    why. Only an AMBIGUOUS or a contradicted effect is resolved, so a decision never overrides
    a known outcome; evidence that contradicts the decision later sends it back to a person."""
    if not reason.strip():
        raise NotaryInputError("a resolution needs a reason")
    if not by.strip():
        raise NotaryInputError("a resolution names the person who made it")
    now = lock_log(log=tenant.log)
    history = _history_of(tenant=tenant, effect_id=effect_id)
    stands = standing(history)
    ambiguous = stands.state is not None and stands.state.state == State.AMBIGUOUS
    if not (ambiguous or stands.contradictions):
        raise NotaryConflict(
            "not_ambiguous",
            f"{effect_id} is {stands.state or 'in flight'}: only an AMBIGUOUS or contradicted "
            "effect is resolved",
        )
    body = {"happened": happened, "reason": reason.strip(), "by": by.strip()}
    [row] = append_entries(
        log=tenant.log,
        items=[NewEntry(kind=EntryKind.RESOLVED, body=body, effect_id=effect_id)],
        created_at=now,
    )
    entry = row.as_ledger_entry()
    _project_effect(tenant=tenant, history=[*history, entry])
    return entry


MAX_NOTE = 4000
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@transaction.atomic(durable=True)
def effect_note(*, tenant: Tenant, effect_id: str, text: str, by: str) -> LedgerEntry:
    """A person's note on an effect (what they checked, whom they asked): a NOTED entry, so it
    is kept, proved and exported with the effect's other entries. It settles nothing."""
    text = text.strip()
    if not text or len(text) > MAX_NOTE:
        raise NotaryInputError(f"a note is 1 to {MAX_NOTE} characters")
    if _CONTROL_BUT_LINES.search(text) or not _encodable(text):
        raise NotaryInputError("a note holds a control character or a lone surrogate")
    if not by.strip():
        raise NotaryInputError("a note names the person who wrote it")
    now = lock_log(log=tenant.log)
    history = _history_of(tenant=tenant, effect_id=effect_id)
    [row] = append_entries(
        log=tenant.log,
        items=[NewEntry(EntryKind.NOTED, {"by": by.strip(), "text": text}, effect_id)],
        created_at=now,
    )
    entry = row.as_ledger_entry()
    _project_effect(tenant=tenant, history=[*history, entry])
    return entry


@transaction.atomic
def review_assign(
    *, tenant: Tenant, effect_ids: Sequence[str], assignee: User, by: str
) -> list[str]:
    """Give effects in the review queue to a reviewer (one who may decide them); return the ids
    assigned. An effect no longer waiting for a person is left as it is."""
    if not (assignee.is_active and assignee.has_perm("notary.resolve_effect")):
        raise NotaryInputError(f"{assignee.get_username()} does not review effects")
    waiting = Effect.objects.filter(WAITING_FOR_A_PERSON, tenant=tenant, effect_id__in=effect_ids)
    assigned = sorted(waiting.values_list("effect_id", flat=True))
    now = timezone.now()
    for effect_id in assigned:
        ReviewAssignment.objects.update_or_create(
            tenant=tenant,
            effect_id=effect_id,
            defaults={"assignee": assignee, "assigned_by": by, "assigned_at": now},
        )
    return assigned


def review_unassign(*, tenant: Tenant, effect_id: str) -> bool:
    """Give an effect back to the queue; whether it was assigned."""
    deleted, _ = ReviewAssignment.objects.filter(tenant=tenant, effect_id=effect_id).delete()
    return deleted > 0


def attestation_record(
    *,
    tenant: Tenant,
    by: str,
    effect_id: str,
    stage: str,
    reference: str,
    detail: str,
    service_key: ApiKey | None = None,
) -> tuple[LedgerEntry, str]:
    """A cooperating service's word on an effect: that it did, or did not, perform it
    (evidence, settling the effect the way a provider's webhook does), or, written ahead, that
    it is about to act. A write-ahead attestation is acknowledged only when the protocol allows
    the service to act now (protocol.intent_refusal); else NotaryConflict, and the service must
    not act. A write-ahead service's word that it performed or not counts only after an
    acknowledged intent (protocol.attestation_refusal); else NotaryConflict, and a 'performed'
    is kept all the same, marked refused, as a contradiction for a person (committed before the
    refusal is raised). `service_key`, the key attesting (the API always gives it), speaks only
    for the targets it names: NotaryForbidden for another's effect. None: code of the notary's
    own."""
    recorded, refused = _attestation_record(
        tenant=tenant,
        by=by,
        effect_id=effect_id,
        stage=stage,
        reference=reference,
        detail=detail,
        service_key=service_key,
    )
    if refused is not None:
        seq = {"kept_as": recorded[0].seq} if recorded is not None else {}
        raise NotaryConflict("not_acknowledged", refused, **seq)
    assert recorded is not None
    return recorded


@transaction.atomic(durable=True)
def _attestation_record(
    *,
    tenant: Tenant,
    by: str,
    effect_id: str,
    stage: str,
    reference: str,
    detail: str,
    service_key: ApiKey | None,
) -> tuple[tuple[LedgerEntry, str] | None, str | None]:
    """The attestation recorded (with what it did) and, if it was refused, why."""
    if service_key is not None:
        _check_attestation_scope(tenant=tenant, service_key=service_key, effect_id=effect_id)
    evidence = {
        "source": "attestation",
        "by": by,
        "outcome": "intent" if stage == "before_acting" else stage,
        "type": "attestation" if stage != "before_acting" else "before_acting",
        "result_ref": reference,
        "detail": detail,
    }
    now = lock_log(log=tenant.log)
    history = _history_of(tenant=tenant, effect_id=effect_id)
    target = Target.objects.get(tenant=tenant, name=_proposed_body(history)["target"])
    declared = target.declaration()
    if stage == "before_acting":
        refused = intent_refusal(history, declared, now)
        if refused is not None:
            return None, refused
        [(observed, _)] = _observe(
            tenant=tenant,
            histories={effect_id: history},
            observations=[(effect_id, evidence)],
            now=now,
        )
        return (observed, "acknowledged"), None
    refused = attestation_refusal(history, declared)
    if refused is None:
        return effect_observe(tenant=tenant, effect_id=effect_id, evidence=evidence), None
    if stage != "performed":
        return None, refused  # it says nothing was done: nothing to keep
    kept = {**evidence, "refused": refused}
    [recorded] = _observe(
        tenant=tenant, histories={effect_id: history}, observations=[(effect_id, kept)], now=now
    )
    return recorded, f"{refused}; kept as a contradiction for a person to see"


def _check_attestation_scope(*, tenant: Tenant, service_key: ApiKey, effect_id: str) -> None:
    if service_key.role != Role.SERVICE or service_key.tenant_id != tenant.pk:
        raise NotaryForbidden("permission_denied", "only a service key of this tenant attests")
    target = _proposed_body(_history_of(tenant=tenant, effect_id=effect_id))["target"]
    if not service_key.targets.filter(name=target).exists():
        raise NotaryForbidden(
            "permission_denied",
            f"this service key attests for {_scope_names(service_key)}, not for {target!r}",
        )


def _scope_names(service_key: ApiKey) -> str:
    names = sorted(service_key.targets.values_list("name", flat=True))
    return ", ".join(map(repr, names)) if names else "no target"


@transaction.atomic(durable=True)
def effects_rebuild(*, tenant: Tenant) -> int:
    """Recompute the tenant's Effect table from its ledger alone; return how many effects."""
    lock_log(log=tenant.log)
    Effect.objects.filter(tenant=tenant).delete()
    rows = []
    for effect_id, history in iter_effect_histories(log=tenant.log):
        if history[0].kind != EntryKind.PROPOSED:
            continue  # entries appended outside the effect protocol (ledger_append)
        rows.append(Effect(tenant=tenant, effect_id=effect_id, **effect_fields(history)))
        if len(rows) >= 1000:
            Effect.objects.bulk_create(rows)
            rows = []
    Effect.objects.bulk_create(rows)
    return Effect.objects.filter(tenant=tenant).count()


def _project_effect(
    *, tenant: Tenant, history: Sequence[LedgerEntry], created: bool = False
) -> dict[str, Any]:
    """Write the Effect row for `history`, the effect's entries as of this transaction, and
    the review notice its change calls for in the same transaction (the outbox); return the
    row's fields, so a caller answering with the row need not read it back."""
    fields = effect_fields(history)
    effect_id = history[0].effect_id
    before = _write_effect_row(tenant=tenant, effect_id=effect_id, fields=fields, created=created)
    due = _review_event(before=before, after=fields, history=history)
    if due is not None:
        _review_notice_add(tenant=tenant, effect_id=effect_id, event=due[0], cause=due[1])
    return fields


def _write_effect_row(
    *, tenant: Tenant, effect_id: str, fields: Mapping[str, Any], created: bool
) -> dict[str, Any] | None:
    """Insert the effect's row, or update it and return its state and contradicted as they
    were (None if it has no row), by written-out statements: every proposal and outcome writes
    one, and building them through the ORM cost more than running them. On PostgreSQL the
    update is one statement that also gives the values it replaced."""
    names = tuple(fields)
    values = [_EFFECT_COLUMNS[name].get_db_prep_save(fields[name], connection) for name in names]
    statements = _effect_row_statements(names, connection.vendor)
    with connection.cursor() as cursor:
        if created:
            cursor.execute(statements.insert, [tenant.pk, effect_id, *values])
            return None
        if connection.vendor == "postgresql":
            cursor.execute(statements.update_returning, [*values, tenant.pk, effect_id])
            row = cursor.fetchone()
        else:
            cursor.execute(statements.select, [tenant.pk, effect_id])
            row = cursor.fetchone()
            cursor.execute(statements.update, [*values, tenant.pk, effect_id])
    return None if row is None else {"state": row[0], "contradicted": bool(row[1])}


_EFFECT_COLUMNS = {field.name: field for field in Effect._meta.concrete_fields}


@dataclass(frozen=True)
class _EffectRowStatements:
    insert: str
    update_returning: str  # PostgreSQL's: the update, giving the state it replaced
    select: str
    update: str


@functools.cache
def _effect_row_statements(names: tuple[str, ...], vendor: str) -> _EffectRowStatements:
    """The statements that write the projection `names` (effect_fields' keys, always the same)
    on the database `vendor` (the cache's key) names."""
    quote = connection.ops.quote_name
    table = quote(Effect._meta.db_table)
    columns = [quote(str(_EFFECT_COLUMNS[name].column)) for name in names]
    assignments = ", ".join(f"{column} = %s" for column in columns)
    key = "tenant_id = %s AND effect_id = %s"
    return _EffectRowStatements(
        insert=(
            f"INSERT INTO {table} (tenant_id, effect_id, {', '.join(columns)})"
            f" VALUES ({', '.join(['%s'] * (len(columns) + 2))})"
        ),
        update_returning=(
            f"UPDATE {table} AS e SET {assignments}"
            f" FROM (SELECT id, state, contradicted FROM {table} WHERE {key}) AS stored"
            " WHERE e.id = stored.id RETURNING stored.state, stored.contradicted"
        ),
        select=f"SELECT state, contradicted FROM {table} WHERE {key}",
        update=f"UPDATE {table} SET {assignments} WHERE {key}",
    )


def _review_event(
    *,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any],
    history: Sequence[LedgerEntry],
) -> tuple[ReviewEvent, str] | None:
    """The event the reviewers are told of when the row goes from `before` to `after`, and
    its cause (the seq of the entry that queued the effect), or None. A person's decision
    newly contradicted is that, not a plain entry into the queue."""
    stood = standing(history)
    cause = queued_by(stood)
    if cause is None:
        return None
    newly_contradicted = after["contradicted"] and not (before or {}).get("contradicted")
    if (
        newly_contradicted
        and stood.verdict is not None
        and stood.verdict.kind == EntryKind.RESOLVED
    ):
        return ReviewEvent.DECISION_CONTRADICTED, str(cause)
    if waits_for_a_person(after) and not waits_for_a_person(before):
        return ReviewEvent.ENTERED_QUEUE, str(cause)
    return None


def _review_notice_add(*, tenant: Tenant, effect_id: str, event: ReviewEvent, cause: str) -> bool:
    """The notice, once per (effect, event, cause), its sending queued after commit; whether
    this call wrote it."""
    notice, created = ReviewNotice.objects.get_or_create(
        tenant=tenant, effect_id=effect_id, event=event, cause=cause
    )
    if created:
        # robust: a broker that is down fails no committed write; the notice waits for the
        # stranded-notice sweep (notary.tasks.send_stranded_review_notices).
        transaction.on_commit(lambda: _queue_review_notice(notice.pk), robust=True)
    return created


def _queue_review_notice(notice_id: int) -> None:
    from notary.tasks import send_review_notice  # the tasks module imports this one

    send_review_notice.delay(notice_id)


def _history_of(*, tenant: Tenant, effect_id: str) -> list[LedgerEntry]:
    history = effect_entries(log=tenant.log, effect_id=effect_id)
    if not any(e.kind == EntryKind.PROPOSED for e in history):
        raise NotaryNotFound(f"no effect {effect_id!r}")
    return history


def _proposed_body(history: Sequence[LedgerEntry]) -> dict[str, Any]:
    body: dict[str, Any] = next(e for e in history if e.kind == EntryKind.PROPOSED).body_value()
    return body


def _requester_refusal(lease: Lease | None, dispatcher: ApiKey | None) -> tuple[str, str] | None:
    """A lease is granted to whoever requested it: an agent key of another holder does not
    dispatch under it (notary.identities compares holders as a reader would)."""
    if lease is None or dispatcher is None or same_holder(lease.requested_by, dispatcher.holder):
        return None
    return (
        "lease_scope",
        f"the lease was requested by {lease.requested_by}, not {dispatcher.holder}",
    )


def _lease_state(lease: Lease | None) -> LeaseState | None:
    """The lease as its ledger entries leave it. The Lease row is written with them, in the same
    transaction under the same lock, so under the lock the row is the ledger's state."""
    if lease is None:
        return None
    return LeaseState(_lease_terms(lease), lease.revoked_at, lease.revoked_by or None)


def _lease_terms(lease: Lease) -> LeaseTerms:
    """What the lease row grants, as the protocol reads a lease."""
    return LeaseTerms(
        lease_id=lease.lease_id,
        case_id=lease.case_id,
        action=lease.action,
        expires_at=lease.expires_at,
        granted_by=lease.granted_by,
        limits=lease.limits,
        payload_hash=lease.payload_hash or None,
        currency=lease.currency or None,
        case_class=lease.case_class or None,
        case_pattern=lease.case_pattern or None,
        budgets=tuple(Budget.from_body(b) for b in lease.budgets),
    )


def _check_proposal(
    *, tenant: Tenant, effect_id: str, proposal: Mapping[str, Any]
) -> TargetDeclaration:
    """The target's declaration, once the proposal is one the notary may write: well formed,
    declaring its target as the record does, and with money that reads one way."""
    if set(proposal) - {"case_class", "declaration"} != PROPOSAL_KEYS:
        raise NotaryInputError(PROPOSAL_KEYS_REFUSAL)
    for key, limit in _PROPOSAL_TEXT.items():
        _check_text(f"proposal.{key}", proposal[key], limit=limit)
    if "case_class" in proposal:
        _check_text("proposal.case_class", proposal["case_class"], limit=MAX_CASE_ID)
    if proposal["tenant"] != tenant.slug:
        raise NotaryInputError(f"proposal.tenant must be this key's tenant, {tenant.slug!r}")
    expected = effect_id_for(
        proposal["case_id"], proposal["target"], proposal["action"], tenant=tenant.slug
    )
    if effect_id != expected:
        raise NotaryInputError(
            f"effect_id {effect_id!r} is not the id of this case, target and action ({expected})"
        )
    if not isinstance(proposal["payload"], dict):
        raise NotaryInputError("proposal.payload must be a JSON object")
    try:
        check_depth(proposal["payload"])
        digest = hashlib.sha256(canonical_json(proposal["payload"])).hexdigest()
    except CanonicalJSONError as exc:
        raise NotaryInputError(f"proposal.payload has no canonical JSON form: {exc}") from exc
    if proposal["payload_hash"] != digest:
        raise NotaryInputError("proposal.payload_hash is not the SHA-256 of the canonical payload")
    _check_premises(proposal["premises"])
    return _checked_declaration(tenant=tenant, proposal=proposal)


def _checked_declaration(*, tenant: Tenant, proposal: Mapping[str, Any]) -> TargetDeclaration:
    """The proposal's target's declaration, as the notary's record holds it: the proposal's
    own, if it carries one, must be the same, and a money target's payload must read one way
    (gate_client.money)."""
    target = target_registered(tenant=tenant, name=proposal["target"])
    if target is None:
        raise NotaryInputError(f"no target {proposal['target']!r}: register it first")
    held = target.declaration()
    if "declaration" in proposal:
        try:
            given = TargetDeclaration.from_body(proposal["declaration"])
        except (ValueError, TypeError) as exc:
            raise NotaryInputError(f"proposal.declaration: {exc}") from exc
        differences = given.differences(held)
        if differences:
            raise NotaryInputError(
                f"proposal.declaration is not target {target.name!r}'s record (proposal != "
                f"record): {'; '.join(differences)}"
            )
    ambiguous = proposal_refusal(proposal["payload"], held)
    if ambiguous is not None:
        raise NotaryInputError(f"proposal.payload: {ambiguous}")
    return held


_PROPOSAL_TEXT = {
    "case_id": MAX_CASE_ID,
    "target": MAX_TARGET_NAME,
    "action": MAX_ACTION,
    "lease_id": MAX_LEASE_ID,
    "tenant": MAX_TARGET_NAME,  # a slug
    "payload_hash": 64,
}


def _check_holding(premises: Any) -> None:
    """Premises a dispatch is made on: well formed, and every one holds."""
    _check_premises(premises)
    failed = [p["name"] for p in premises if not p["holds"]]
    if failed:
        raise NotaryInputError(f"premises do not hold ({', '.join(failed)}): nothing to dispatch")


def _check_premises(premises: Any) -> None:
    if not isinstance(premises, list) or not all(
        isinstance(p, dict)
        and set(p) == {"name", "holds", "observed"}
        and isinstance(p["name"], str)
        and isinstance(p["holds"], bool)
        for p in premises
    ):
        raise NotaryInputError("premises must be a list of {name, holds, observed} objects")
    if len(premises) > MAX_PREMISES:
        raise NotaryInputError(f"at most {MAX_PREMISES} premises")
    for premise in premises:
        _check_text("a premise's name", premise["name"], limit=MAX_PREMISE_NAME)


def _check_outcome(*, kind: str, body: Mapping[str, Any]) -> None:
    """The shape of an outcome body; what it may claim is the protocol's to say."""
    if kind not in AGENT_VERDICT_KINDS:
        raise NotaryInputError(f"kind {kind!r}: one of {', '.join(sorted(AGENT_VERDICT_KINDS))}")
    required: dict[str, type] = {}
    if kind == EntryKind.COMMITTED:
        required = {"state": str, "attempt": int, "result_ref": str}
        state = body.get("state")
        if not isinstance(state, str) or state not in COMMITTED_STATES:
            raise NotaryInputError(f"state: one of {', '.join(sorted(COMMITTED_STATES))}")
    elif kind == EntryKind.FAILED:
        required = {"attempt": int, "code": str}
    elif kind == EntryKind.REFUSED:
        required = {"reason": str}
    for name, expected in required.items():
        value = body.get(name)
        if not isinstance(value, expected) or isinstance(value, bool):
            raise NotaryInputError(f"a {kind} entry needs {name} ({expected.__name__})")
    _check_outcome_fields(body)


def _check_outcome_fields(body: Mapping[str, Any]) -> None:
    """What any outcome body carries, whatever its kind: an attempt is a number, and what the
    Effect row copies (result_ref, the failure code in its state) fits its column."""
    attempt = body.get("attempt")
    if attempt is not None and (not isinstance(attempt, int) or isinstance(attempt, bool)):
        raise NotaryInputError("attempt must be an integer")
    if "result_ref" in body:
        _check_text("result_ref", body["result_ref"], limit=MAX_RESULT_REF, empty=True)
    if "code" in body:
        _check_text("code", body["code"], limit=MAX_FAILURE_CODE)


# --- the notary's own recovery sweep ---------------------------------------------------------


_LOOKUP_TIMEOUT = timedelta(seconds=5)


def effect_sweep(*, tenant: Tenant, effect_id: str) -> str:
    """Settle one effect left in flight, as far as the notary can: the protocol's recovery
    decision (protocol.decide) with the notary's own answers — the target's lookup where a
    lookup_url is registered, the evidence in the ledger — so the sweep and the gate reach the
    same verdict. Never resends and never re-checks premises: those need the agent's
    credentials, and the gate's recover() does them. Returns what it did; safe to rerun."""
    effect = Effect.objects.filter(tenant=tenant, effect_id=effect_id).first()
    if effect is None or effect.settled_at is not None or effect.dispatched_at is None:
        return "nothing_to_do"
    target = Target.objects.get(tenant=tenant, name=effect.target)
    history = effect_entries(log=tenant.log, effect_id=effect_id)
    answer: Answer | None = None
    while True:
        facts = Facts(history, target.declaration(), timezone.now(), answer=answer)
        step = decide(facts)
        if isinstance(step, Settled):
            return "nothing_to_do"
        if isinstance(step, Wait):
            return "in_flight"
        if isinstance(step, Record):
            return _notary_verdict(tenant=tenant, effect=effect, verdict=step)
        if isinstance(step, HeldOnEvidence):
            return "held"  # in the review queue: a person decides
        if not isinstance(step, Ask):
            return "needs_agent"  # a re-check and a resend are the agent's to make
        if step.source == "notary":
            answer = evidence_answer(history)
        elif target.lookup_url:
            answer = _notary_lookup(target, effect_id, _proposed_body(history)["payload"])
        else:
            return "needs_agent"  # only the agent can look this target up


@transaction.atomic(durable=True)
def _notary_verdict(*, tenant: Tenant, effect: Effect, verdict: Record) -> str:
    """Record the verdict unless the effect moved on since it was read: settled by someone
    else, or dispatched again (the verdict would speak of the wrong attempt)."""
    lock_log(log=tenant.log)
    history = effect_entries(log=tenant.log, effect_id=effect.effect_id)
    if standing(history).state is not None or last_attempt(history) != effect.attempts:
        return "settled_meanwhile"
    body = _by_notary(verdict)
    entry = append_entry(log=tenant.log, kind=verdict.kind, body=body, effect_id=effect.effect_id)
    _project_effect(tenant=tenant, history=[*history, entry.as_ledger_entry()])
    return str(body.get("state", verdict.kind)).lower()


def _notary_lookup(target: Target, effect_id: str, payload: Mapping[str, Any]) -> Answer:
    """Ask the target; whether its "not found" counts is the protocol's to say."""
    service = HttpTarget(
        name=target.name,
        base_url=target.lookup_url.rstrip("/"),
        tier=GateTier(target.tier),
        queryable=True,
        key_window=None,
        # Nothing is sent from here: the lookup's own timeout needs no in-flight window.
        max_inflight=max(target.max_inflight, _LOOKUP_TIMEOUT),
        timeout_seconds=_LOOKUP_TIMEOUT.total_seconds(),
    )
    try:
        return service.lookup(effect_id, payload)
    except ValueError as exc:  # an answer that is not the contract's
        return Unknown(f"unreadable lookup answer: {exc}")


# --- review notices: who is told, and the claims their sending takes (notary.notifications) ---

MAX_REVIEW_EMAILS = 50
MAX_WEBHOOK_URL = 2000  # ReviewNotifications.webhook_url
_WEBHOOK_URL = URLValidator(schemes=["http", "https"])


class NoticeChannel(enum.StrEnum):
    EMAIL = "email"
    WEBHOOK = "webhook"


@transaction.atomic(durable=True)
def review_notifications_set(
    *, tenant: Tenant, emails: Sequence[str] | None = None, webhook_url: str | None = None
) -> tuple[ReviewNotifications, str]:
    """Set who the tenant's review notices go to; None keeps what is set. `emails` empty: the
    active Finance reviewers with an address. `webhook_url` "": no webhook; a URL gets a new
    signing secret, returned this once (else "") and never shown again."""
    checked = None if emails is None else _checked_emails(emails)
    if webhook_url:
        try:
            _WEBHOOK_URL(webhook_url)
        except ValidationError as refused:
            raise NotaryInputError(f"webhook URL {webhook_url!r}: an http(s) URL") from refused
        if len(webhook_url) > MAX_WEBHOOK_URL:
            raise NotaryInputError(f"the webhook URL is longer than {MAX_WEBHOOK_URL} characters")
    config, _ = ReviewNotifications.objects.select_for_update().get_or_create(tenant=tenant)
    if checked is not None:
        config.emails = checked
    secret = ""
    if webhook_url is not None:
        if webhook_url:
            secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
        config.webhook_url, config.webhook_secret = webhook_url, secret
    config.save()
    return config, secret


def _checked_emails(emails: Sequence[str]) -> list[str]:
    """Valid addresses, each once, in the order given."""
    unique = list(dict.fromkeys(address.strip() for address in emails))
    if len(unique) > MAX_REVIEW_EMAILS:
        raise NotaryInputError(f"at most {MAX_REVIEW_EMAILS} addresses")
    for address in unique:
        try:
            validate_email(address)
        except ValidationError as refused:
            raise NotaryInputError(f"{address!r} is not an email address") from refused
    return unique


@transaction.atomic(durable=True)
def review_notice_overdue(*, effect: Effect) -> bool:
    """The sla_passed notice of the effect's current wait (once per queued_at), its sending
    queued after commit; whether this call wrote it."""
    if effect.queued_at is None:
        return False
    return _review_notice_add(
        tenant=effect.tenant,
        effect_id=effect.effect_id,
        event=ReviewEvent.SLA_PASSED,
        cause=effect.queued_at.isoformat(),
    )


def review_notice_claim(
    *, notice_id: int, channel: NoticeChannel, destination: str
) -> datetime | None:
    """Take the channel's one send for this run before sending, recording where it goes (the
    addresses, or the URL): the moment claimed, or None when another run took it (or sent it)."""
    now = timezone.now()
    taken = ReviewNotice.objects.filter(
        pk=notice_id, **{f"{channel}_sent_at__isnull": True}
    ).update(**{f"{channel}_sent_at": now, _DESTINATION[channel]: destination})
    return now if taken else None


_DESTINATION = {NoticeChannel.EMAIL: "email_to", NoticeChannel.WEBHOOK: "webhook_url"}


def review_notice_release(
    *, notice_id: int, channel: NoticeChannel, claimed_at: datetime, error: str
) -> None:
    """Give back a claim when the failure proves nothing was delivered, saying why: a later
    try may send it."""
    ReviewNotice.objects.filter(pk=notice_id, **{f"{channel}_sent_at": claimed_at}).update(
        **{f"{channel}_sent_at": None, f"{channel}_error": error}
    )


def review_notice_record(*, notice_id: int, channel: NoticeChannel, error: str) -> None:
    """What became of a claimed send: "" delivered, else why it may not have been (the claim
    stays: what may have been delivered is never sent again)."""
    ReviewNotice.objects.filter(pk=notice_id).update(**{f"{channel}_error": error})


def review_notice_skip(*, notice_id: int, channel: NoticeChannel, why: str) -> None:
    """Say why an unclaimed channel was not sent (nothing configured, nobody waits now)."""
    ReviewNotice.objects.filter(pk=notice_id, **{f"{channel}_sent_at__isnull": True}).update(
        **{f"{channel}_error": why}
    )
