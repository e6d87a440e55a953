"""The ingestion queue: ids of stored events waiting for a worker, in a Redis list.

A web process adds an event's id with one round trip (RPUSH, and SET NX of the `scheduled` flag
in the same pipeline) and sends the Celery task ingest_pending only when it set the flag, so a
burst of events costs one task, not one each; the task takes the ids in batches and ingests a
batch in one transaction. The list is a hint, never the record: the event is committed before
its id is added, and an id lost with Redis (down, flushed, a worker killed after taking it) is
found again by the sweep (ingest_stranded_events), which looks at the database."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings

PENDING = "webhooks:ingest:pending"
SCHEDULED = "webhooks:ingest:scheduled"
# How long the flag holds without a drainer renewing it: past this, a task lost before it ran
# (or a worker gone) no longer stops the next event from sending a new one.
SCHEDULED_SECONDS = 30


@cache
def _client() -> redis.Redis:
    # Short timeouts: a Redis that stopped answering must not hold a webhook's answer.
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)


def add(raw_event_id: int) -> bool:
    """Put the id at the end of the list; True if the caller must send ingest_pending (no
    drainer is scheduled). Raises redis.RedisError when Redis is unreachable."""
    pipe = _client().pipeline(transaction=False)
    pipe.rpush(PENDING, raw_event_id)
    pipe.set(SCHEDULED, 1, nx=True, ex=SCHEDULED_SECONDS)
    _, scheduled = pipe.execute()
    return bool(scheduled)


def take(limit: int) -> list[int]:
    """Up to `limit` ids from the front of the list (atomic: no id goes to two takers), and the
    drainer's flag renewed."""
    pipe = _client().pipeline(transaction=False)
    pipe.lpop(PENDING, limit)
    pipe.expire(SCHEDULED, SCHEDULED_SECONDS)
    taken, _ = pipe.execute()
    return [int(raw_event_id) for raw_event_id in taken or []]


def release() -> bool:
    """The drainer found the list empty: drop the flag, then look again. An id added before the
    flag was dropped is seen here; one added after sets the flag itself and sends a new task.
    True if the caller must go on draining (it took the flag back)."""
    client = _client()
    client.delete(SCHEDULED)
    if not client.llen(PENDING):
        return False
    return bool(client.set(SCHEDULED, 1, nx=True, ex=SCHEDULED_SECONDS))


def pending() -> list[int]:
    """The ids waiting, in order (for checks and the benchmark)."""
    return [int(raw_event_id) for raw_event_id in _client().lrange(PENDING, 0, -1)]
