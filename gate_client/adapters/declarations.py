"""What the provider adapters derive their declarations from, once: the tier decides whether a
target has a key window, and the client's own bound on a request, plus a margin, its
max_inflight (protocol.late_request)."""

from __future__ import annotations

import enum
import hashlib
import re
from datetime import timedelta
from typing import Final

from gate_client.targets import Tier

MAX_TARGET_NAME = 63  # the notary's rule (notary.services._TARGET_NAME): 1-63 of a-z0-9_-
_OUTSIDE_NAME = re.compile(r"[^a-z0-9_-]+")

# Beyond the client's own bound on a request: DNS, the moment between DISPATCHED and the
# request, clocks apart, a provider finishing after the client gave up.
INFLIGHT_MARGIN = timedelta(seconds=5)


class _Derived(enum.Enum):
    FROM_TIER = "from the tier"


FROM_TIER: Final = _Derived.FROM_TIER  # the default: what the tier says
Derived = _Derived


def key_window_for(
    tier: Tier, key_window: timedelta | _Derived | None, *, provider: str, window: timedelta
) -> timedelta | None:
    """The key window a target of `tier` has: `window` (the provider's) for tier 1 unless
    given, none otherwise; a contradiction is a TypeError naming it."""
    if isinstance(key_window, _Derived):
        return window if tier == Tier.DEDUPES else None
    if key_window is not None and tier != Tier.DEDUPES:
        raise TypeError(
            f"only a tier-1 target dedupes on a key, so only it has a key window: tier "
            f"{int(tier)} cannot have key_window={key_window}"
        )
    if key_window is None and tier == Tier.DEDUPES:
        raise TypeError(
            f"tier 1 with key_window=None says the key dedupes for good, and {provider} forgets "
            f"a key after {window}: give its window"
        )
    if key_window is not None and key_window <= timedelta(0):
        raise ValueError("key_window must be positive")
    return key_window


def requests_timeouts(timeout: object, whose: str) -> tuple[float, float]:
    """(connect, read) of a requests-style ``timeout``: one number is both, a pair is each;
    a timeout that bounds nothing (None waits for ever) is a TypeError asking for one."""
    parts = timeout if isinstance(timeout, tuple) else (timeout, timeout)
    if len(parts) == 2 and all(_is_seconds(part) for part in parts):
        return float(parts[0]), float(parts[1])
    raise TypeError(
        f"{whose} timeout {timeout!r} does not bound a request (None waits for ever): give "
        "the HTTP client a timeout in seconds, or the target max_inflight="
    )


def _is_seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def target_name(dotted: str) -> str:
    """A dotted name (a function's ``module.qualname``, an MCP tool's name) as a target name
    the notary takes: lowercased, each dotted part stripped of what the alphabet lacks
    (``__main__`` is ``main``, ``<locals>`` goes), the parts joined by '-'. A longer one keeps
    its last characters and a digest of the whole, so it stays unique."""
    parts = [
        _OUTSIDE_NAME.sub("-", part.lower()).strip("_-")
        for part in dotted.split(".")
        if part != "<locals>"
    ]
    name = "-".join(part for part in parts if part)
    if name and len(name) <= MAX_TARGET_NAME:
        return name
    digest = hashlib.sha256(dotted.encode()).hexdigest()[:8]
    tail = name[-(MAX_TARGET_NAME - len(digest) - 1) :].lstrip("_-")
    return f"{tail}-{digest}" if tail else f"target-{digest}"
