"""Webhooks in the admin, read only: where each provider posts, every verified event as it came,
and the quarantine of recent requests that were not verified events, with a count per endpoint."""

from __future__ import annotations

from django.contrib import admin

from ledger.admin import ReadOnlyAdmin
from webhooks import selectors
from webhooks.models import Endpoint, Ingestion, RawEvent, UnverifiedRequest


@admin.register(Endpoint)
class EndpointAdmin(ReadOnlyAdmin):
    list_display = [
        "public_id",
        "provider",
        "tenant",
        "target",
        "unverified_count",
        "unverified_this_minute",
        "last_unverified_at",
        "created_at",
    ]
    list_filter = ["provider", "tenant"]
    fields = [
        "public_id",
        "url_path",
        "provider",
        "tenant",
        "target",
        "effect_id_path",
        "unverified_count",
        "unverified_this_minute",
        "last_unverified_at",
    ]

    @admin.display(description="the provider posts to")
    def url_path(self, obj: Endpoint) -> str:
        return f"/webhooks/{obj.public_id}/"

    @admin.display(description="not verified, this minute (429s included)")
    def unverified_this_minute(self, obj: Endpoint) -> int:
        return selectors.unverified_this_minute(endpoint=obj)


@admin.register(RawEvent)
class RawEventAdmin(ReadOnlyAdmin):
    list_display = ["provider_event_id", "endpoint", "verified", "received_at"]
    list_filter = ["verified", "endpoint__provider"]
    search_fields = ["provider_event_id"]
    fields = ["endpoint", "provider_event_id", "received_at", "verified", "verification_error"]


@admin.register(UnverifiedRequest)
class UnverifiedRequestAdmin(ReadOnlyAdmin):
    list_display = ["received_at", "endpoint", "reason", "body_size", "body_sha256"]
    list_filter = ["reason", "endpoint__provider"]
    search_fields = ["body_sha256"]
    fields = ["endpoint", "received_at", "reason", "body_size", "body_sha256", "headers", "error"]


@admin.register(Ingestion)
class IngestionAdmin(ReadOnlyAdmin):
    list_display = ["raw_event", "effect_id", "outcome", "observed_seq", "ingested_at"]
    list_filter = ["outcome"]
    search_fields = ["effect_id"]
    fields = ["raw_event", "effect_id", "outcome", "observed_seq", "ingested_at"]
