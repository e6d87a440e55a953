"""Webhook ingestion (the ingestion queue, drained in batches as events are stored), the sweep
for events whose task was lost and the quarantine's expiry (both Celery beat). Each takes ids or
nothing and is safe to rerun."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from webhooks import queue, selectors, services

log = logging.getLogger(__name__)


@shared_task  # type: ignore[untyped-decorator]
def ingest_event(raw_event_id: int) -> str:
    return services.event_ingest(raw_event_id=raw_event_id).outcome


@shared_task  # type: ignore[untyped-decorator]
def ingest_pending() -> int:
    """Drain the ingestion queue (webhooks.queue), WEBHOOK_INGEST_BATCH events per transaction,
    until it is empty or WEBHOOK_INGEST_BATCHES_PER_TASK batches are done (then the task queues
    itself again, still holding the flag, so other tasks get the worker meanwhile); return how
    many events it ingested. A batch that fails is ingested one event at a time, so one bad
    event holds up no other; what fails alone waits for the sweep. Safe to rerun: ids are taken
    once, and ingesting an ingested event adds nothing."""
    ingested = 0
    for _ in range(settings.WEBHOOK_INGEST_BATCHES_PER_TASK):
        batch = queue.take(settings.WEBHOOK_INGEST_BATCH)
        if not batch:
            if queue.release():
                continue
            return ingested
        try:
            ingested += len(services.events_ingest(raw_event_ids=batch))
        except Exception:
            log.warning("batch of %s events failed; one at a time", len(batch), exc_info=True)
            ingested += sum(_ingest_alone(raw_event_id) for raw_event_id in batch)
    ingest_pending.delay()
    return ingested


def _ingest_alone(raw_event_id: int) -> bool:
    try:
        services.event_ingest(raw_event_id=raw_event_id)
    except Exception:  # left for the sweep, which retries it after the grace
        log.exception("could not ingest raw event %s", raw_event_id)
        return False
    return True


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
