"""An in-process target with its own ground truth, for the gate's unit tests.

It implements the Target protocol honestly: it acts at most once per call, dedupes on the key
only when told to, answers lookups only when queryable, and can drop its response or "crash" the
caller at a chosen moment. The process-level matrix runs the same protocol against a real server."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from gate_client.targets import (
    FailedDefinitively,
    Found,
    InDoubt,
    LookupOutcome,
    NotFound,
    SendOutcome,
    Sent,
    Tier,
)


class NoOpTarget:
    """A tier-1 target that acts every time it is asked, remembers what it sent, and finds
    what it sent. Its max in-flight time is long enough that a busy machine's slow answer is
    not a late one (protocol.late_request)."""

    name = "noop"
    tier = Tier.DEDUPES
    queryable = True
    key_window: timedelta | None = timedelta(hours=24)
    max_inflight = timedelta(seconds=30)
    evidence_window: timedelta | None = None
    attests_before_acting = False
    lookup_needs_key = False

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        self.sent.append(effect_id)
        return Sent(f"ref_{len(self.sent)}")

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        return Found(f"ref_{effect_id}") if effect_id in self.sent else NotFound()


class SimulatedCrash(BaseException):
    """The calling process dies here: nothing after this point runs, the journal stays."""


@dataclass
class ServiceTarget:
    name: str = "service"
    tier: Tier = Tier.DEDUPES
    queryable: bool = True
    key_window: timedelta | None = timedelta(hours=24)
    max_inflight: timedelta = timedelta(seconds=5)
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    lookup_needs_key: bool = False
    dedupes: bool = True
    # Ground truth: every time the service really acted, with the key it was sent under.
    acted: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    crash_before_acting: bool = False
    crash_after_acting: bool = False
    drop_response: bool = False
    refuse_with: str | None = None

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        if self.crash_before_acting:
            self.crash_before_acting = False
            raise SimulatedCrash("before the request left")
        if self.refuse_with is not None:
            return FailedDefinitively(self.refuse_with)
        if not (self.dedupes and self._done(effect_id)):
            self.acted.append((effect_id, dict(payload)))
        if self.crash_after_acting:
            self.crash_after_acting = False
            raise SimulatedCrash("after the service acted")
        if self.drop_response:
            self.drop_response = False
            raise InDoubt("response lost")
        return Sent(f"ref-{effect_id[-6:]}")

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        if not self.queryable:
            raise AssertionError("the gate asked a target that cannot be asked")
        return Found(f"ref-{effect_id[-6:]}") if self._done(effect_id) else NotFound()

    def times_acted(self, effect_id: str) -> int:
        return sum(1 for key, _ in self.acted if key == effect_id)

    def _done(self, effect_id: str) -> bool:
        return any(key == effect_id for key, _ in self.acted)
