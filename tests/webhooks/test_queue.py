"""The ingestion queue: a served notary puts each stored event's id on it and sends one drain
task for a burst, and a real worker ingests the burst in batches, each event exactly once. The
flag that keeps one drain task due never strands an id."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.test import override_settings

from ledger.core.entries import EntryKind
from ledger.selectors import iter_entries
from notary import services as notary_services
from notary.models import Effect
from testkit.celery_worker import running_worker
from testkit.factories import INSTANT, dispatched, register
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.redis_server import private_redis
from testkit.webhook_signing import (
    as_headers,
    body_of,
    new_secret,
    signed_headers,
    stripe_refund_event,
)
from webhooks import queue, services
from webhooks.models import Ingestion, RawEvent


@pytest.fixture
def empty_queue(tmp_path: Path) -> Iterator[str]:
    """The queue on a Redis of this test's own (its URL), so no other test's worker or queue
    shares its list while it counts what is on it."""
    with private_redis(tmp_path) as server, override_settings(REDIS_URL=server.url):
        queue._client.cache_clear()
        try:
            yield server.url
        finally:
            queue._client.cache_clear()


def test_one_drain_is_due_at_a_time_and_an_id_added_while_it_stops_is_not_stranded(
    empty_queue: str,
) -> None:
    assert queue.add(1) is True  # nothing due: the caller sends the task
    assert queue.add(2) is False  # one is due: it will take this one too
    assert queue.take(10) == [1, 2]
    assert queue.release() is False  # nothing waits: the drain ends
    assert queue.add(3) is True  # and the next event sends a new one
    assert queue.take(10) == [3]
    assert queue.add(4) is False  # added while the drain still holds the flag...
    assert queue.release() is True  # ...so the drain takes the flag back and goes on
    assert queue.take(10) == [4]
    assert queue.release() is False
    assert queue.pending() == []


@pytest.mark.slow
def test_a_burst_of_webhooks_is_ingested_in_batches_each_exactly_once(
    transactional_db: None, tmp_path: Path, empty_queue: str
) -> None:
    tenant = notary_services.tenant_create(slug="refunds", name="Refunds")
    secret = new_secret("stripe")
    endpoint = services.endpoint_create(
        tenant=tenant,
        target=register(tenant, "stripe-refunds", evidence_window=INSTANT),
        provider="stripe",
        secrets=[secret],
    )
    effects = [dispatched(tenant, "stripe-refunds", f"case-{n}") for n in range(30)]
    broker = {"REDIS_URL": empty_queue, "CELERY_TASK_ALWAYS_EAGER": "false"}
    with (
        running_notary(child_database_url(), tmp_path, settings=broker) as url,
        httpx.Client(base_url=url, timeout=60) as client,
        ThreadPoolExecutor(8) as pool,
    ):

        def deliver(effect: str) -> int:
            body = body_of(stripe_refund_event(effect))
            headers = {
                "content-type": "application/json",
                **as_headers(signed_headers("stripe", body, secret)),
            }
            path = f"/webhooks/{endpoint.public_id}/"
            return client.post(path, content=body, headers=headers).status_code

        assert list(pool.map(deliver, effects)) == [200] * 30
    # Each answer came after its row was committed and its id queued; nothing ingested yet.
    stored = list(RawEvent.objects.order_by("pk").values_list("pk", flat=True))
    assert len(stored) == 30
    assert sorted(queue.pending()) == stored  # each once (concurrent answers race to queue)
    assert not Ingestion.objects.exists()
    with running_worker(queue="celery", WEBHOOK_INGEST_BATCH="7", **broker) as (_, wait):
        wait(lambda: Ingestion.objects.count() == 30)
    assert queue.pending() == []
    observed = [e for e in iter_entries(log=tenant.log) if e.kind == EntryKind.OBSERVED]
    by_seq = dict(Ingestion.objects.values_list("observed_seq", "raw_event_id"))
    assert sorted(by_seq[e.seq] for e in observed) == stored
    assert sorted(e.effect_id for e in observed) == sorted(effects)  # each exactly once
    assert set(Effect.objects.filter(tenant=tenant).values_list("state", flat=True)) == {
        "COMMITTED_ON_EVIDENCE"
    }
