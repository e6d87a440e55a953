"""Reads of the webhooks app."""

from __future__ import annotations

import uuid
from datetime import datetime

from notary import counters
from webhooks.models import Endpoint, RawEvent


def endpoint_for_url(*, public_id: str) -> Endpoint | None:
    try:
        key = uuid.UUID(public_id)
    except ValueError:
        return None
    return Endpoint.objects.select_related("tenant", "target").filter(public_id=key).first()


def events_awaiting_ingestion(*, received_before: datetime) -> list[int]:
    """Verified events stored before `received_before` that no ingestion has taken up: their
    task was lost (the broker was down when they arrived)."""
    return list(
        RawEvent.objects.filter(
            verified=True, ingestion__isnull=True, received_at__lt=received_before
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def unverified_counter_key(*, endpoint: Endpoint) -> str:
    """The notary.counters key of the endpoint's requests that were not verified events."""
    return f"webhooks:unverified:{endpoint.public_id}"


def unverified_this_minute(*, endpoint: Endpoint) -> int:
    """The endpoint's requests in the current minute that were not verified events, those
    refused for the rate limit included."""
    return counters.current(unverified_counter_key(endpoint=endpoint))
