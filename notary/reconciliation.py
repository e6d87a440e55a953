"""Reconciliation with the provider: the notary lists what a target's provider did in a window
and records what gate_client.reconciliation finds against the tenant's admitted effects, as
RECONCILED ledger entries (and their ReconciliationFinding rows).

Writes, like notary.services, in one transaction each, kept here beside the provider reads they
need: the provider is listed first, outside any transaction (a network call never holds the log's
lock), then the comparison is made and its new findings appended under lock_log, against the
effects as they stand at that instant. A finding is written once per target, kind and subject
(the provider's object, or the effect it does not show), so a rerun, or an overlapping window,
writes nothing new. No finding changes an effect's state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import resend
import stripe
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gate_client.adapters.resend_email import emails_created
from gate_client.adapters.stripe_refunds import refunds_created
from gate_client.http_target import effects_created
from gate_client.reconciliation import (
    Finding,
    FindingKind,
    ProviderRecord,
    ReconciliationError,
    Window,
    compare,
)
from ledger.core.entries import EntryKind
from ledger.selectors import effect_entries
from ledger.services import NewEntry, append_entries, lock_log
from notary import selectors
from notary.errors import NotaryConflict, NotaryDependencyFailed, NotaryInputError
from notary.models import (
    Effect,
    ReconciliationFinding,
    ReconciliationProvider,
    ReconciliationSource,
    Target,
    Tenant,
)
from notary.projection import effect_fields, finding_fields

PROVIDER_TIMEOUT_SECONDS = 20.0
MAX_WINDOW = timedelta(days=31)  # one run lists at most this much of the provider's history
DEFAULT_SPAN = timedelta(days=1)  # a window given no since: the day before its until
STRIPE_API = "https://api.stripe.com"
RESEND_API = "https://api.resend.com"


@dataclass(frozen=True)
class Reconciliation:
    """What one run did: how many objects the provider listed, every finding the comparison
    made (those recorded before included), and the ones this run wrote."""

    target: Target
    window: Window
    listed: int
    findings: list[Finding]
    written: list[ReconciliationFinding]

    def totals(self) -> dict[str, Any]:
        """How many findings it made, wrote and found recorded before, and by kind."""
        by_kind = Counter(str(f.kind) for f in self.findings)
        return {
            "found": len(self.findings),
            "written": len(self.written),
            "recorded_before": len(self.findings) - len(self.written),
            "by_kind": {str(kind): by_kind[kind] for kind in FindingKind},
        }


@transaction.atomic(durable=True)
def reconciliation_source_set(
    *,
    target: Target,
    provider: str,
    base_url: str = "",
    api_key: str | None = None,
    lookback: timedelta | None = None,
    enabled: bool = True,
) -> ReconciliationSource:
    """Say where the target's provider is listed, and with which key (None keeps the one set).
    `lookback` defaults to the target's key window, else its max in-flight time: how long
    before a window its objects may have been made."""
    if provider not in ReconciliationProvider.values:
        raise NotaryInputError(
            f"provider {provider!r}: one of {', '.join(ReconciliationProvider.values)}"
        )
    if provider == ReconciliationProvider.REFERENCE and not base_url:
        raise NotaryInputError("the reference provider is listed at its base URL: give base_url")
    if base_url and not base_url.startswith(("http://", "https://")):
        raise NotaryInputError(f"base URL {base_url!r}: an http(s) URL")
    if api_key is not None and (api_key != api_key.strip() or len(api_key) > 500):
        raise NotaryInputError("an API key is at most 500 characters, no surrounding spaces")
    if lookback is not None and lookback < timedelta(0):
        raise NotaryInputError("lookback must not be negative")
    source = ReconciliationSource.objects.select_for_update().filter(target=target).first()
    if source is None:
        source = ReconciliationSource(target=target)
    source.provider = provider
    source.base_url = base_url.rstrip("/")
    if api_key is not None:
        source.api_key = api_key
    source.lookback = lookback if lookback is not None else target.key_window or target.max_inflight
    source.enabled = enabled
    source.save()
    return source


def target_reconcile(
    *,
    tenant: Tenant,
    target: Target,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Reconciliation:
    """Reconcile one target of the tenant over [since, until) (by default until now, and since
    DEFAULT_SPAN before until): list the provider, compare, and record the new findings.
    NotaryInputError for a bad window; NotaryConflict("no_reconciliation_source") for a target
    with no source; NotaryDependencyFailed("provider_unavailable") when the provider cannot be
    listed (nothing is recorded: a list that could not be read proves nothing)."""
    if target.tenant_id != tenant.pk:
        raise NotaryInputError(f"target {target.name!r} is not {tenant.slug}'s")
    source = ReconciliationSource.objects.filter(target=target).first()
    if source is None:
        raise NotaryConflict(
            "no_reconciliation_source",
            f"target {target.name!r} has no reconciliation source: its operator sets one with "
            "`manage.py reconciliation_source`",
        )
    until = until if until is not None else timezone.now()
    since = since if since is not None else until - DEFAULT_SPAN
    try:
        window = Window(since, until)
    except ReconciliationError as exc:
        raise NotaryInputError(str(exc)) from exc
    if until - since > MAX_WINDOW:
        raise NotaryInputError(f"a window is at most {MAX_WINDOW.days} days")
    if until > timezone.now() + timedelta(minutes=1):
        raise NotaryInputError("a window ends now or before: the provider has no future")
    try:
        records = list(provider_records(source, window.listed(source.lookback)))
    except ReconciliationError as exc:
        raise NotaryDependencyFailed("provider_unavailable", f"{target.name}: {exc}") from exc
    findings, written = _record_findings(
        tenant=tenant, target=target, window=window, records=records
    )
    return Reconciliation(target, window, len(records), findings, written)


def provider_records(source: ReconciliationSource, window: Window) -> Iterator[ProviderRecord]:
    """What the source's provider lists in `window`; ReconciliationError if it cannot."""
    if source.provider == ReconciliationProvider.STRIPE:
        client = stripe.StripeClient(
            source.api_key,
            base_addresses={"api": source.base_url or STRIPE_API},
            max_network_retries=2,  # a list is a read: retrying it is harmless
            http_client=stripe.RequestsClient(timeout=PROVIDER_TIMEOUT_SECONDS),
        )
        return refunds_created(client, window)
    if source.provider == ReconciliationProvider.RESEND:
        http_client = resend.RequestsClient(timeout=int(PROVIDER_TIMEOUT_SECONDS))
        return emails_created(http_client, source.api_key, source.base_url or RESEND_API, window)
    return effects_created(
        source.base_url,
        window,
        api_key=source.api_key,
        timeout_seconds=PROVIDER_TIMEOUT_SECONDS,
        money=source.target.declaration().money,
    )


@transaction.atomic(durable=True)
def _record_findings(
    *, tenant: Tenant, target: Target, window: Window, records: list[ProviderRecord]
) -> tuple[list[Finding], list[ReconciliationFinding]]:
    """Compare under the log's lock, against the effects as they stand now, and append the
    findings not recorded before, one RECONCILED entry each."""
    now = lock_log(log=tenant.log)
    admitted = selectors.reconciliation_admitted(
        tenant=tenant,
        target=target,
        effect_ids=[r.effect_id for r in records if r.effect_id is not None],
        window=window,
    )
    findings = compare(records, admitted, window)
    recorded = set(
        ReconciliationFinding.objects.filter(tenant=tenant, target=target.name).values_list(
            "kind", "subject"
        )
    )
    new = [f for f in findings if (str(f.kind), f.subject) not in recorded]
    if not new:
        return findings, []
    bodies = [f.body(target=target.name, window=window) for f in new]
    entries = append_entries(
        log=tenant.log,
        items=[
            NewEntry(EntryKind.RECONCILED, body, finding.effect_id)
            for finding, body in zip(new, bodies, strict=True)
        ],
        created_at=now,
    )
    written = ReconciliationFinding.objects.bulk_create(
        ReconciliationFinding(tenant=tenant, **finding_fields(entry.as_ledger_entry()))
        for entry in entries
    )
    # An effect's finding is one of its entries: its projection's last_seq moves with it.
    for effect_id in sorted({f.effect_id for f in new if f.effect_id}):
        history = effect_entries(log=tenant.log, effect_id=effect_id)
        Effect.objects.filter(tenant=tenant, effect_id=effect_id).update(**effect_fields(history))
    return findings, written


@transaction.atomic(durable=True)
def findings_rebuild(*, tenant: Tenant) -> int:
    """Recompute the tenant's ReconciliationFinding table from its RECONCILED entries alone;
    return how many findings. Each target, kind and subject is the first entry's that recorded
    it, as the live write keeps it (a later one is written only once that row was deleted)."""
    lock_log(log=tenant.log)
    ReconciliationFinding.objects.filter(tenant=tenant).delete()
    ReconciliationFinding.objects.bulk_create(
        ReconciliationFinding(tenant=tenant, **fields)
        for fields in selectors.finding_rows_of_ledger(tenant=tenant).values()
    )
    return ReconciliationFinding.objects.filter(tenant=tenant).count()


def beat_window(source: ReconciliationSource, *, now: datetime) -> Window | None:
    """The beat's next window for the source: from where it last stopped (the first time, a
    day back) to NOTARY_RECONCILE_LAG_SECONDS ago, so the provider's list has caught up, and
    at most MAX_WINDOW long (a source far behind catches up a window a run); None when empty."""
    latest = now - timedelta(seconds=settings.NOTARY_RECONCILE_LAG_SECONDS)
    since = source.reconciled_until or latest - timedelta(days=1)
    until = min(latest, since + MAX_WINDOW)
    return Window(since, until) if since < until else None


def source_reconciled(*, source: ReconciliationSource, window: Window) -> bool:
    """Move the source's mark to the window's end, if no other run moved it meanwhile."""
    moved = ReconciliationSource.objects.filter(
        pk=source.pk, reconciled_until=source.reconciled_until
    ).update(reconciled_until=window.until)
    return bool(moved)
