"""Reads of the webhooks app."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Any

from django.db import connection

from ledger.core.entries import Entry as LedgerEntry
from ledger.core.entries import EntryKind
from ledger.models import Entry, Log
from notary import counters
from webhooks.models import Endpoint, Ingestion, RawEvent


def endpoint_remembered(*, public_id: str) -> tuple[Endpoint, list[str]] | None:
    """endpoint_for_url as this process last read it, read now if it has not: the receiver's
    read, which stores an event by an INSERT that checks the secret is still active, and reads
    again for anything but a new event (services.event_receive)."""
    try:
        remembered = _remembered.get(uuid.UUID(public_id))
    except ValueError:
        return None
    return remembered or endpoint_for_url(public_id=public_id)


def endpoint_for_url(*, public_id: str) -> tuple[Endpoint, list[str]] | None:
    """The endpoint a provider posts to, with its active secrets (oldest first), in one query;
    remembered for endpoint_remembered."""
    try:
        key = uuid.UUID(public_id)
    except ValueError:
        return None
    value = _PUBLIC_ID.get_db_prep_value(key, connection)
    with connection.cursor() as cursor:
        cursor.execute(_ENDPOINT_WITH_SECRETS, [value])
        rows = cursor.fetchall()
    if not rows:
        _remembered.pop(key, None)
        return None
    # Built as the ORM builds a row it read (Model.from_db), without a raw queryset's per-query
    # work of matching columns to fields, which cost more than the query.
    endpoint = Endpoint.from_db(connection.alias, _ENDPOINT_FIELDS, rows[0][:-1])
    found = endpoint, [row[-1] for row in rows if row[-1] is not None]
    if len(_remembered) >= REMEMBERED_ENDPOINTS:
        _remembered.clear()
    _remembered[key] = found
    return found


# The endpoints this process last read, by public id; only existing ones, at most
# REMEMBERED_ENDPOINTS of them.
_remembered: dict[uuid.UUID, tuple[Endpoint, list[str]]] = {}
REMEMBERED_ENDPOINTS = 10_000


_PUBLIC_ID = Endpoint._meta.get_field("public_id")
# Only what receiving reads, in the model's order (as from_db takes them); any other field of
# the Endpoint loads on first use.
_ENDPOINT_READ = [
    field
    for field in Endpoint._meta.concrete_fields
    if field.attname in {"id", "public_id", "tenant_id", "target_id", "provider"}
]
_ENDPOINT_FIELDS = [field.attname for field in _ENDPOINT_READ]
_ENDPOINT_WITH_SECRETS = (
    f"SELECT {', '.join(f'e.{field.column}' for field in _ENDPOINT_READ)}, s.secret "
    'FROM "webhooks_endpoint" e LEFT JOIN "webhooks_endpointsecret" s '
    "ON s.endpoint_id = e.id AND s.retired_at IS NULL WHERE e.public_id = %s ORDER BY s.id"
)


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


def observed_evidence_problems(*, log: Log) -> list[str]:
    """verify_ledger's check of webhook evidence (settings.LEDGER_VERIFY_CHECKS): every OBSERVED
    entry citing a webhook has the ingestion that appended it, whose raw event is the one the
    entry names and hashes to the digest it records (body_sha256). One line per problem, so a
    raw event wiped or rewritten under the evidence derived from it is named by its seq."""
    ingestions = {
        ingestion.observed_seq: ingestion
        for ingestion in Ingestion.objects.filter(
            raw_event__endpoint__tenant__log=log, observed_seq__isnull=False
        ).select_related("raw_event")
    }
    problems: list[str] = []
    rows = Entry.objects.filter(log=log, kind=EntryKind.OBSERVED).order_by("seq")
    for row in rows.iterator(chunk_size=500):
        entry = row.as_ledger_entry()
        try:
            evidence = entry.body_value()
        except ValueError:
            continue  # verify_log names an entry that is not canonical JSON
        if not isinstance(evidence, dict) or evidence.get("source") != "webhook":
            continue
        problem = _evidence_problem(entry, evidence, ingestions.pop(entry.seq, None))
        if problem:
            problems.append(f"seq {entry.seq}: {problem}")
    problems += [
        f"seq {seq}: ingestion {ingestion.pk} names it, but it is no OBSERVED webhook entry"
        for seq, ingestion in sorted(ingestions.items(), key=lambda item: item[0] or 0)
    ]
    return problems


def _evidence_problem(entry: LedgerEntry, evidence: dict[str, Any], ingestion: Any) -> str:
    event_id = evidence.get("event_id")
    if ingestion is None:
        return f"OBSERVED webhook event {event_id!r} has no stored raw event (it was removed)"
    raw: RawEvent = ingestion.raw_event
    if ingestion.effect_id != entry.effect_id or raw.provider_event_id != event_id:
        return f"OBSERVED webhook event {event_id!r} is not the raw event {raw.pk} ingested there"
    digest = evidence.get("body_sha256")
    if digest is not None and hashlib.sha256(bytes(raw.body)).hexdigest() != digest:
        return (
            f"raw event {raw.pk} (event {event_id!r}) does not hash to the body_sha256 "
            "the OBSERVED entry records: it was altered"
        )
    return ""
