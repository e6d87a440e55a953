"""Issue 16, item 3: raw webhook events cannot be wiped or rewritten unseen.

TRUNCATE of raw events and ingestions is refused (statement triggers, migration 0004), CASCADE
from the endpoints included. A superuser past every trigger can still remove or alter them, and
verify_ledger then names the OBSERVED entry whose raw event is gone or no longer hashes to the
digest the entry records. Each test runs in one transaction that is rolled back."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from ledger.core.note import Signer
from notary.models import Tenant
from testkit.factories import INSTANT, dispatched, register
from testkit.webhook_signing import (
    as_headers,
    body_of,
    new_secret,
    signed_headers,
    stripe_refund_event,
)
from webhooks import services
from webhooks.models import Ingestion, RawEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def ingested(acme: Tenant, signer: Signer) -> Ingestion:
    """A Stripe refund event delivered, verified and ingested as OBSERVED evidence."""
    secret = new_secret("stripe")
    endpoint = services.endpoint_create(
        tenant=acme,
        target=register(acme, "refunds", evidence_window=INSTANT),
        provider="stripe",
        secrets=[secret],
    )
    body = body_of(stripe_refund_event(dispatched(acme, "refunds", "case-1")))
    headers = as_headers(signed_headers("stripe", body, secret))
    stored, _ = services.event_receive(
        endpoint=endpoint, secrets=[secret], body=body, headers=headers
    )
    ingestion = services.event_ingest(raw_event_id=stored.pk)
    assert ingestion.observed_seq is not None
    assert verify_ledger(acme).startswith(f"OK {acme.log.origin}:")
    return ingestion


def verify_ledger(tenant: Tenant) -> str:
    out = io.StringIO()
    call_command("verify_ledger", log=tenant.log.origin, no_progress=True, stdout=out)
    return out.getvalue()


def execute(sql: str, params: list[Any] | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.parametrize(
    "table", ["webhooks_rawevent", "webhooks_ingestion", "webhooks_endpoint", "notary_tenant"]
)
def test_the_database_refuses_truncate_of_raw_events(ingested: Ingestion, table: str) -> None:
    """Directly or by CASCADE from what they reference, TRUNCATE reaches no raw event."""
    with (
        pytest.raises(DatabaseError, match="append-only: TRUNCATE on webhooks_"),
        transaction.atomic(),
    ):
        # The test settings allow TRUNCATE for teardown; an ordinary session does not.
        execute("SET LOCAL ledger.allow_truncate = 'off'")
        execute("SET CONSTRAINTS ALL IMMEDIATE")
        execute(f"TRUNCATE {table} CASCADE")
    assert RawEvent.objects.filter(pk=ingested.raw_event_id).exists()
    assert Ingestion.objects.filter(pk=ingested.pk).exists()


def drop_webhook_triggers() -> None:
    for table in ("webhooks_rawevent", "webhooks_ingestion"):
        execute(f"DROP TRIGGER {table}_append_only ON {table}")


def test_a_rewritten_raw_event_is_named_by_verify_ledger(acme: Tenant, ingested: Ingestion) -> None:
    drop_webhook_triggers()
    execute(
        "UPDATE webhooks_rawevent SET body = %s WHERE id = %s",
        [b'{"forged": true}', ingested.raw_event_id],
    )
    with pytest.raises(CommandError) as failure:
        verify_ledger(acme)
    assert str(failure.value) == (
        f"FAIL: seq {ingested.observed_seq}: raw event {ingested.raw_event_id} (event "
        f"{RawEvent.objects.get(pk=ingested.raw_event_id).provider_event_id!r}) does not hash "
        "to the body_sha256 the OBSERVED entry records: it was altered"
    )


@pytest.mark.parametrize("how", ["delete", "truncate"])
def test_a_wiped_raw_event_is_named_by_verify_ledger(
    acme: Tenant, ingested: Ingestion, how: str
) -> None:
    event_id = ingested.raw_event.provider_event_id
    if how == "delete":
        drop_webhook_triggers()
        execute("DELETE FROM webhooks_ingestion WHERE id = %s", [ingested.pk])
        execute("DELETE FROM webhooks_rawevent WHERE id = %s", [ingested.raw_event_id])
    else:  # past the statement trigger with the teardown's setting, as a superuser can
        execute("SET LOCAL ledger.allow_truncate = 'on'")
        execute("SET CONSTRAINTS ALL IMMEDIATE")
        execute("TRUNCATE webhooks_rawevent CASCADE")
    with pytest.raises(CommandError) as failure:
        verify_ledger(acme)
    assert str(failure.value) == (
        f"FAIL: seq {ingested.observed_seq}: OBSERVED webhook event {event_id!r} has no stored "
        "raw event (it was removed)"
    )
