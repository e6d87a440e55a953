"""The ingestion queue: a served notary puts each stored event's id on it and sends one drain
task for a burst, and a real worker ingests the burst in batches, each event exactly once. The
flag that keeps one drain task due never strands an id."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from ledger.core.entries import EntryKind
from ledger.selectors import iter_entries, log_head
from notary import services as notary_services
from notary.models import Effect, Tenant
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
from webhooks.tasks import ingest_pending, ingest_stranded_events


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


def served_deliveries(
    tmp_path: Path, broker: dict[str, str], count: int
) -> tuple[Tenant, list[str]]:
    """A tenant with `count` dispatched refunds, each one's webhook posted to a served notary
    (stored and queued, not ingested, since no worker runs); the tenant and the effects."""
    tenant = notary_services.tenant_create(slug="refunds", name="Refunds")
    secret = new_secret("stripe")
    endpoint = services.endpoint_create(
        tenant=tenant,
        target=register(tenant, "stripe-refunds", evidence_window=INSTANT),
        provider="stripe",
        secrets=[secret],
    )
    effects = [dispatched(tenant, "stripe-refunds", f"case-{n}") for n in range(count)]
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

        assert list(pool.map(deliver, effects)) == [200] * count
    return tenant, effects


def ingested_each_once(tenant: Tenant, effects: list[str]) -> None:
    stored = list(RawEvent.objects.order_by("pk").values_list("pk", flat=True))
    observed = [e for e in iter_entries(log=tenant.log) if e.kind == EntryKind.OBSERVED]
    by_seq = dict(Ingestion.objects.values_list("observed_seq", "raw_event_id"))
    assert sorted(by_seq[e.seq] for e in observed) == stored
    assert sorted(e.effect_id for e in observed) == sorted(effects)  # each exactly once
    assert set(Effect.objects.filter(tenant=tenant).values_list("state", flat=True)) == {
        "COMMITTED_ON_EVIDENCE"
    }


@pytest.mark.slow
def test_a_burst_of_webhooks_is_ingested_in_batches_each_exactly_once(
    transactional_db: None, tmp_path: Path, empty_queue: str
) -> None:
    broker = {"REDIS_URL": empty_queue, "CELERY_TASK_ALWAYS_EAGER": "false"}
    tenant, effects = served_deliveries(tmp_path, broker, 30)
    # Each answer came after its row was committed and its id queued, each once (concurrent
    # answers race to queue); nothing ingested yet. On a machine loaded enough, an enqueue can
    # outlast the second webhooks.queue gives Redis, so that it never holds an answer: such an
    # event is stored and not queued, and waits for the stranded-event sweep.
    stored = list(RawEvent.objects.order_by("pk").values_list("pk", flat=True))
    assert len(stored) == 30
    queued = queue.pending()
    assert len(set(queued)) == len(queued)
    assert set(queued) <= set(stored)
    assert not Ingestion.objects.exists()
    with running_worker(queue="celery", WEBHOOK_INGEST_BATCH="7", **broker) as (_, wait):
        wait(lambda: Ingestion.objects.count() == len(queued))
    assert queue.pending() == []
    with override_settings(WEBHOOK_INGEST_GRACE_SECONDS=0):
        assert ingest_stranded_events() == len(stored) - len(queued)
    ingested_each_once(tenant, effects)


def celery_workers_started_here() -> list[int]:
    """The pids of the Celery workers this process started (its own children)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if parent == os.getpid() and b"celery" in command and b"worker" in command:
            found.append(int(stat.parent.name))
    return found


def waiting_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        [(waiting,)] = cursor.fetchall()
    return bool(waiting)


@pytest.mark.slow
def test_a_worker_killed_mid_batch_writes_nothing_and_the_sweep_ingests_each_event_once(
    transactional_db: None, tmp_path: Path, empty_queue: str
) -> None:
    broker = {"REDIS_URL": empty_queue, "CELERY_TASK_ALWAYS_EAGER": "false"}
    tenant, effects = served_deliveries(tmp_path, broker, 10)
    size = log_head(log=tenant.log).size
    # As in the burst test, an enqueue that outlasted its second left its event to the sweep.
    queued = queue.pending()
    assert queued, "no delivery was queued"
    with psycopg.connect(child_database_url()) as holder:
        # The tenant's log locked here: the worker's first batch takes its ids, locks its
        # events and waits for the log inside its transaction, where it is SIGKILLed.
        holder.execute("SELECT 1 FROM ledger_log WHERE id = %s FOR UPDATE", [tenant.log.pk])
        with running_worker(queue="celery", WEBHOOK_INGEST_BATCH="4", **broker) as (_, wait):
            wait(waiting_for_a_lock)
            [worker] = celery_workers_started_here()
            os.kill(worker, signal.SIGKILL)
        holder.rollback()
    assert queue.pending() == queued[4:]  # the batch's ids (up to 4) went with the worker
    assert not Ingestion.objects.exists()
    assert log_head(log=tenant.log).size == size  # nothing half done
    with override_settings(WEBHOOK_INGEST_GRACE_SECONDS=0):
        assert ingest_stranded_events() == 10  # all of them, queued or not, run here
    # The ids still queued: ingested already, so nothing is added.
    assert ingest_pending() == len(queued[4:])
    assert queue.pending() == []
    assert Ingestion.objects.count() == 10
    assert log_head(log=tenant.log).size == size + 20  # an OBSERVED and a COMMITTED each
    ingested_each_once(tenant, effects)
