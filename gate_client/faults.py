"""Crash points for tests and experiments: the process SIGKILLs itself where it is told to.

Set INTERLOCK_CRASH_AT to one CrashPoint value before the process starts. Unset, `crash_point`
is one comparison against None."""

from __future__ import annotations

import enum
import os
import signal


class CrashPoint(enum.StrEnum):
    BEFORE_PROPOSED = "before_proposed"  # the decision is not durable yet
    AFTER_PROPOSED = "after_proposed"
    AFTER_DISPATCHED = "after_dispatched"  # the request has not left
    AFTER_TARGET_ACTED = "after_target_acted"  # the target acted; its response is unread
    AFTER_RESPONSE = "after_response"  # the response is read; COMMITTED is not durable


def _armed_point() -> CrashPoint | None:
    value = os.environ.get("INTERLOCK_CRASH_AT")
    if not value:
        return None
    try:
        return CrashPoint(value)
    except ValueError as exc:
        choices = ", ".join(p.value for p in CrashPoint)
        raise RuntimeError(f"INTERLOCK_CRASH_AT={value!r} is not one of: {choices}") from exc


_ARMED = _armed_point()


def crash_point(point: CrashPoint) -> None:
    if _ARMED is point:
        os.kill(os.getpid(), signal.SIGKILL)
