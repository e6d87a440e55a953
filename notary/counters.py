"""Windowed counters for throttles, in Django's cache (Redis when REDIS_URL is set, shared by
every web process; per process in the embedded mode).

A counter never fails its caller: while the cache is unreachable a per-process counter stands
in, with the same windows, and the outage is logged once when it starts and once when it ends.
A process that lost the cache tries it again once per `_RETRY_SECONDS` (one request of that
process pays for the try), so an outage costs one failed connection attempt a second per
process rather than one per request."""

from __future__ import annotations

import logging
import threading
import time

from django.core.cache import cache
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

_RETRY_SECONDS = 1.0
# What an unreachable cache raises (refused, reset, timed out); any other error is a bug.
_CACHE_DOWN = (RedisError, OSError)
# Past this many keys the per-process counter drops its expired windows (and then waits for
# twice as many as it kept before it looks again).
_LOCAL_SWEEP_AT = 10_000

_lock = threading.Lock()
# key -> (monotonic time its window ends, count in it)
_local: dict[str, tuple[float, int]] = {}
_outage_since: float | None = None  # monotonic time the cache was found unreachable
_next_try = 0.0  # while out: when this process tries the cache again
_sweep_at = _LOCAL_SWEEP_AT


def count(key: str, *, window_seconds: int) -> int:
    """Add one to `key`'s count in the current window and return the new count. Never raises:
    while the cache is unreachable, a per-process counter stands in (logged once per outage)."""
    if _cache_usable():
        try:
            value = _cache_count(key, window_seconds)
        except _CACHE_DOWN as exc:  # the cache is unreachable: count here for now
            _cache_failed(exc)
        else:
            _cache_worked()
            return value
    return _local_count(key, window_seconds)


def current(key: str) -> int:
    """`key`'s count in the current window without adding to it; never raises (same
    fallback)."""
    if _cache_usable():
        try:
            value = cache.get(key, 0)
        except _CACHE_DOWN as exc:  # the cache is unreachable: read the local count
            _cache_failed(exc)
        else:
            _cache_worked()
            return int(value)
    return _local_current(key)


def _cache_count(key: str, window_seconds: int) -> int:
    # The window starts with the first count and ends with the key's expiry.
    if cache.add(key, 1, timeout=window_seconds):
        return 1
    try:
        value = int(cache.incr(key))
    except ValueError:  # the window ended between add and incr: this count opens the next one
        cache.add(key, 1, timeout=window_seconds)
        return 1
    if value == 1:  # it ended inside incr (Redis's INCR made a key with no expiry): open one
        cache.touch(key, timeout=window_seconds)
    return value


def _cache_usable() -> bool:
    """Whether to ask the cache: always while it works; while it is out, one caller of this
    process at a time once the retry interval has passed."""
    global _next_try
    if _outage_since is None:
        return True
    now = time.monotonic()
    with _lock:
        if now < _next_try:
            return False
        _next_try = now + _RETRY_SECONDS
        return True


def _cache_failed(exc: RedisError | OSError) -> None:
    global _outage_since, _next_try
    now = time.monotonic()
    with _lock:
        first = _outage_since is None
        if first:
            _outage_since = now
        _next_try = now + _RETRY_SECONDS
    if first:
        log.warning(
            "cache unreachable (%s: %s): counting per process until it is back",
            type(exc).__name__,
            exc,
        )


def _cache_worked() -> None:
    global _outage_since
    if _outage_since is None:
        return
    with _lock:
        since, _outage_since = _outage_since, None
        _local.clear()  # the cache counts again; what was counted here ends with the outage
    if since is not None:
        log.warning("cache reachable again after %.1fs: counting in it", time.monotonic() - since)


def _local_count(key: str, window_seconds: int) -> int:
    now = time.monotonic()
    with _lock:
        if len(_local) >= _sweep_at:
            _sweep(now)
        ends, value = _local.get(key, (0.0, 0))
        if ends <= now:
            ends, value = now + window_seconds, 0
        _local[key] = (ends, value + 1)
        return value + 1


def _local_current(key: str) -> int:
    with _lock:
        ends, value = _local.get(key, (0.0, 0))
    return value if ends > time.monotonic() else 0


def _sweep(now: float) -> None:
    global _sweep_at
    for key in [k for k, (ends, _) in _local.items() if ends <= now]:
        del _local[key]
    _sweep_at = max(_LOCAL_SWEEP_AT, 2 * len(_local))
