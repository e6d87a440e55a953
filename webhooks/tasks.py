"""Webhook ingestion (queued as each event is stored), the sweep for events whose task was lost
and the quarantine's expiry (both Celery beat). Each takes ids or nothing and is safe to rerun."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from webhooks import selectors, services


@shared_task  # type: ignore[untyped-decorator]
def ingest_event(raw_event_id: int) -> str:
    return services.event_ingest(raw_event_id=raw_event_id).outcome


@shared_task  # type: ignore[untyped-decorator]
def ingest_stranded_events() -> int:
    """Queue verified events left uningested past the grace (not those just queued)."""
    grace = timedelta(seconds=settings.WEBHOOK_INGEST_GRACE_SECONDS)
    stranded = selectors.events_awaiting_ingestion(received_before=timezone.now() - grace)
    for raw_event_id in stranded:
        ingest_event.delay(raw_event_id)
    return len(stranded)


@shared_task  # type: ignore[untyped-decorator]
def prune_unverified_requests() -> int:
    """Drop quarantined requests past WEBHOOK_QUARANTINE_SECONDS; safe to rerun."""
    return services.quarantine_prune()
