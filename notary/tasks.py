"""The notary's recovery sweep, its reviewers' notices and reconciliation with the providers
(Celery beat runs sweep_in_flight, notify_overdue_reviews, send_stranded_review_notices and
reconcile_with_providers; see CELERY_BEAT_SCHEDULE).

Tasks take ids, load state and call a service, so a task run twice or late does no harm."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task
from django.utils import timezone

from notary import notifications, reconciliation, selectors, services
from notary.errors import NotaryDependencyFailed
from notary.models import ReconciliationSource, Tenant

# A notice's send is retried this many times, waiting twice as long each time from the base.
NOTICE_RETRIES = 5
NOTICE_RETRY_BASE_SECONDS = 30
# A notice no run has tried this long after it was written had its task lost.
NOTICE_STRANDED_AFTER = timedelta(minutes=2)


@shared_task  # type: ignore[untyped-decorator]
def sweep_in_flight() -> int:
    """Queue a settle task for every effect in flight past its target's window."""
    due = selectors.effects_due_for_sweep(now=timezone.now())
    for tenant_id, effect_id in due:
        settle_in_flight_effect.delay(tenant_id, effect_id)
    return len(due)


@shared_task  # type: ignore[untyped-decorator]
def settle_in_flight_effect(tenant_id: int, effect_id: str) -> str:
    return services.effect_sweep(tenant=Tenant.objects.get(pk=tenant_id), effect_id=effect_id)


@shared_task(bind=True, max_retries=NOTICE_RETRIES)  # type: ignore[untyped-decorator]
def send_review_notice(self: Any, notice_id: int) -> Any:
    """Tell the reviewers of one notice, each channel at most once; a channel that certainly
    failed is tried again later, with backoff, a bounded number of times."""
    sent = notifications.send_review_notice(notice_id=notice_id)
    if notifications.Delivery.NOT_SENT in sent.values() and self.request.retries < NOTICE_RETRIES:
        # Returned, not raised: a worker queues the retry for later; run inline (the embedded
        # mode, eager), Celery runs it at once, where a raised one would propagate instead.
        return self.retry(
            countdown=NOTICE_RETRY_BASE_SECONDS * 2**self.request.retries, throw=False
        )
    return {str(channel): str(delivery) for channel, delivery in sent.items()}


@shared_task  # type: ignore[untyped-decorator]
def notify_overdue_reviews() -> int:
    """Write an sla_passed notice for every effect waiting past its review SLA, once per wait;
    each is sent after its commit."""
    return sum(
        services.review_notice_overdue(effect=effect)
        for effect in selectors.overdue_reviews(now=timezone.now())
    )


@shared_task  # type: ignore[untyped-decorator]
def send_stranded_review_notices() -> int:
    """Queue the notices whose sending was lost (a broker down when they were committed)."""
    stranded = selectors.review_notices_unsent(
        created_before=timezone.now() - NOTICE_STRANDED_AFTER
    )
    for notice_id in stranded:
        send_review_notice.delay(notice_id)
    return len(stranded)


# A provider that could not be listed is tried again this many times, then at the next beat.
RECONCILE_RETRIES = 3
RECONCILE_RETRY_SECONDS = 60


@shared_task  # type: ignore[untyped-decorator]
def reconcile_with_providers() -> int:
    """Queue one reconciliation per enabled source (a target with its provider's list)."""
    sources = selectors.reconciliation_sources_enabled()
    for source_id in sources:
        reconcile_target.delay(source_id)
    return len(sources)


@shared_task(bind=True, max_retries=RECONCILE_RETRIES)  # type: ignore[untyped-decorator]
def reconcile_target(self: Any, source_id: int) -> Any:
    """Reconcile the source's target over its next window, and move its mark past it. Safe to
    rerun: a window reconciled twice writes each finding once, and a mark another run moved
    meanwhile is left as that run set it."""
    source = ReconciliationSource.objects.select_related("target__tenant").get(pk=source_id)
    window = reconciliation.beat_window(source, now=timezone.now())
    if window is None:
        return {"written": 0}
    target = source.target
    try:
        done = reconciliation.target_reconcile(
            tenant=target.tenant, target=target, since=window.since, until=window.until
        )
    except NotaryDependencyFailed as exc:  # the provider could not be listed: nothing recorded
        if self.request.retries < RECONCILE_RETRIES:
            return self.retry(countdown=RECONCILE_RETRY_SECONDS, throw=False)
        return {"error": exc.detail}
    reconciliation.source_reconciled(source=source, window=window)
    return {"listed": done.listed, "found": len(done.findings), "written": len(done.written)}
