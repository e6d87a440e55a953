"""Webhooks in the admin, read only: where each provider posts, and every request as it came."""

from __future__ import annotations

from django.contrib import admin

from ledger.admin import ReadOnlyAdmin
from webhooks.models import Endpoint, Ingestion, RawEvent


@admin.register(Endpoint)
class EndpointAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "provider", "tenant", "target", "created_at"]
    list_filter = ["provider", "tenant"]
    fields = ["public_id", "url_path", "provider", "tenant", "target", "effect_id_path"]

    @admin.display(description="the provider posts to")
    def url_path(self, obj: Endpoint) -> str:
        return f"/webhooks/{obj.public_id}/"


@admin.register(RawEvent)
class RawEventAdmin(ReadOnlyAdmin):
    list_display = ["provider_event_id", "endpoint", "verified", "received_at"]
    list_filter = ["verified", "endpoint__provider"]
    search_fields = ["provider_event_id"]
    fields = ["endpoint", "provider_event_id", "received_at", "verified", "verification_error"]


@admin.register(Ingestion)
class IngestionAdmin(ReadOnlyAdmin):
    list_display = ["raw_event", "effect_id", "outcome", "observed_seq", "ingested_at"]
    list_filter = ["outcome"]
    search_fields = ["effect_id"]
    fields = ["raw_event", "effect_id", "outcome", "observed_seq", "ingested_at"]
