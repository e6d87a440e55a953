"""Read-only admin for the ledger: it can be looked at, never edited, through the admin."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ledger.core.canonical import CanonicalJSONError, parse_canonical
from ledger.models import Checkpoint, Cosignature, Entry, Log, SigningKey


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields or ()


@admin.register(Log)
class LogAdmin(ReadOnlyAdmin):
    list_display = ["origin", "size", "created_at"]
    search_fields = ["origin"]
    fields = ["origin", "size", "head_hash_hex", "created_at"]

    @admin.display(description="head hash")
    def head_hash_hex(self, obj: Log) -> str:
        return bytes(obj.head_hash).hex()


@admin.register(Entry)
class EntryAdmin(ReadOnlyAdmin):
    list_display = ["seq", "kind", "effect_id", "log", "created_at"]
    list_filter = ["kind", "log"]
    search_fields = ["effect_id"]
    ordering = ["log", "-seq"]
    list_select_related = ["log"]
    fields = ["log", "seq", "kind", "effect_id", "created_at", "body_text", "prev_hex", "hash_hex"]

    @admin.display(description="body")
    def body_text(self, obj: Entry) -> str:
        raw = bytes(obj.body)
        try:
            parse_canonical(raw)
        except CanonicalJSONError:
            return f"(not canonical JSON) {raw!r}"
        return raw.decode("utf-8")

    @admin.display(description="prev hash")
    def prev_hex(self, obj: Entry) -> str:
        return bytes(obj.prev_hash).hex()

    @admin.display(description="entry hash")
    def hash_hex(self, obj: Entry) -> str:
        return bytes(obj.entry_hash).hex()


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["log", "size", "witnesses", "created_at"]
    list_filter = ["log"]
    ordering = ["log", "-size"]
    fields = ["log", "size", "published_note", "created_at"]

    @admin.display(description="cosigned by")
    def witnesses(self, obj: Checkpoint) -> str:
        """The configured witnesses whose cosignature verifies: a row written by hand shows
        nothing here either."""
        return ", ".join(sorted({c.witness for c in obj.verified_cosignatures})) or "-"

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("cosignatures")


@admin.register(Cosignature)
class CosignatureAdmin(ReadOnlyAdmin):
    list_display = ["checkpoint", "witness", "key_id", "created_at"]
    list_filter = ["witness"]
    list_select_related = ["checkpoint__log"]
    fields = ["checkpoint", "witness", "key_id", "timestamp", "line", "created_at"]


@admin.register(SigningKey)
class SigningKeyAdmin(ReadOnlyAdmin):
    list_display = ["name", "key_id", "valid_from", "valid_until"]
    ordering = ["-valid_from"]
    fields = ["name", "key_id", "vkey", "valid_from", "valid_until"]
