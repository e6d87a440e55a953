"""One failure at any call of the gate's protocol, for the fault-injection tests.

`Calls` counts every call a run makes through the wrappers here (the journal's reads and
writes, the lease check, the target's send and lookup, each premise check) and fails exactly the
one its `Fault` names: before the call, or after it took effect (the entry is on disk, the
service acted) so that the caller never learns it did."""

from __future__ import annotations

import enum
import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from gate_client.authorization import DispatchRequest
from gate_client.journal import LocalJournal
from gate_client.leases import Lease, LeaseState
from gate_client.proposal import Premise, PremiseResult
from gate_client.targets import Found, InDoubt, LookupOutcome, NotFound, SendOutcome, Unknown
from ledger.core.entries import Entry, EntryKind
from testkit.world import ServiceTarget, SimulatedCrash

T = TypeVar("T")

# Calls with an effect outside the caller: failing after one differs from failing before it.
EFFECTFUL = frozenset(
    {
        "journal.record",
        "journal.dispatch",
        "journal.grant_lease",
        "journal.revoke_lease",
        "target.send",
    }
)


class Failure(enum.StrEnum):
    ERROR = "error"  # an ordinary exception: the disk is full, the connection was reset
    CRASH = "crash"  # SimulatedCrash: the process dies at this call
    IN_DOUBT = "in-doubt"  # the target's own "cannot tell" (target.send only)


@dataclass(frozen=True)
class Fault:
    at: int | str  # the n-th call of the run, from 1; or the first call with this name
    failure: Failure
    after: bool = False  # the call took effect, then failed

    def __str__(self) -> str:
        return f"{self.failure}{'-after' if self.after else ''}"


class Calls:
    """The protocol's calls in one run, in order, and the single fault armed for it."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.fault: Fault | None = None
        self.failed_at: int | None = None
        self.raised: BaseException | None = None

    def arm(self, fault: Fault | None) -> None:
        """Start a run: count from zero, and fail once where `fault` says (None: never)."""
        self.log, self.fault, self.failed_at, self.raised = [], fault, None, None

    def call(self, name: str, action: Callable[[], T], error: Callable[[], Exception]) -> T:
        self.log.append(name)
        fault = self.fault
        if fault is None or fault.at not in (len(self.log), name):
            return action()
        self.fault = None  # a single failure per run
        self.failed_at = len(self.log)
        if fault.after:
            action()
        where = f"call {self.failed_at} ({name})"
        if fault.failure == Failure.CRASH:
            self.raised = SimulatedCrash(f"the process died at {where}")
        elif fault.failure == Failure.IN_DOUBT:
            self.raised = InDoubt(f"no answer at {where}")
        else:
            self.raised = error()
        raise self.raised

    def premise(self, name: str, check: Callable[[], PremiseResult]) -> Premise:
        """A premise whose every check is a call of the protocol (an unreachable source)."""
        unreachable = partial(ConnectionError, f"{name}: source unreachable")
        return Premise(name, partial(self.call, "premise", check, unreachable))


def _disk_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def _connection_reset() -> ConnectionError:
    return ConnectionError(errno.ECONNRESET, "Connection reset by peer")


class FaultyJournal:
    """The Journal protocol by delegation to a real LocalJournal, every call counted."""

    def __init__(self, inner: LocalJournal, calls: Calls) -> None:
        self.inner = inner
        self.calls = calls

    def record(self, *, kind: EntryKind, effect_id: str, body: Mapping[str, Any]) -> Entry:
        action = partial(self.inner.record, kind=kind, effect_id=effect_id, body=body)
        return self.calls.call("journal.record", action, _disk_full)

    def propose(self, *, effect_id: str, body: Mapping[str, Any]) -> Entry:
        action = partial(self.inner.propose, effect_id=effect_id, body=body)
        return self.calls.call("journal.propose", action, _disk_full)

    def dispatch(self, request: DispatchRequest) -> Entry:
        action = partial(self.inner.dispatch, request)
        return self.calls.call("journal.dispatch", action, _disk_full)

    def propose_and_dispatch(
        self, *, effect_id: str, body: Mapping[str, Any], request: DispatchRequest
    ) -> None:
        action = partial(
            self.inner.propose_and_dispatch, effect_id=effect_id, body=body, request=request
        )
        return self.calls.call("journal.propose_and_dispatch", action, _disk_full)

    def receipt_entries(self, effect_id: str) -> list[Entry]:
        action = partial(self.inner.receipt_entries, effect_id)
        return self.calls.call("journal.receipt_entries", action, _disk_full)

    def history(self, effect_id: str) -> list[Entry]:
        action = partial(self.inner.history, effect_id)
        return self.calls.call("journal.history", action, _disk_full)

    def unsettled(self) -> list[str]:
        return self.calls.call("journal.unsettled", self.inner.unsettled, _disk_full)

    def evidence(self, effect_id: str) -> Found | NotFound | Unknown:
        action = partial(self.inner.evidence, effect_id)
        return self.calls.call("journal.evidence", action, _disk_full)

    def grant_lease(self, lease: Lease) -> Entry:
        action = partial(self.inner.grant_lease, lease)
        return self.calls.call("journal.grant_lease", action, _disk_full)

    def revoke_lease(self, lease_id: str, *, by: str, reason: str) -> Entry:
        action = partial(self.inner.revoke_lease, lease_id, by=by, reason=reason)
        return self.calls.call("journal.revoke_lease", action, _disk_full)

    def target_declaration(self, name: str) -> None:
        return self.inner.target_declaration(name)  # a local journal keeps none

    def lease_state(self, lease_id: str) -> LeaseState | None:
        action = partial(self.inner.lease_state, lease_id)
        return self.calls.call("journal.lease_state", action, _disk_full)


@dataclass
class SendCall:
    """One call of target.send, with what the journal file held when the gate made it."""

    effect_id: str
    payload: dict[str, Any]
    durable: list[Entry]  # the effect's entries on disk at the moment of the call
    reached: bool = False  # the request reached the service
    replay: bool = False  # ... which had already acted on this key


class FaultyTarget:
    """A ServiceTarget behind every call counted; each send snapshots the journal file."""

    def __init__(self, inner: ServiceTarget, calls: Calls, journal_path: Path) -> None:
        self.inner = inner
        self.calls = calls
        self.journal_path = journal_path
        self.sends: list[SendCall] = []
        self.name = inner.name
        self.tier = inner.tier
        self.queryable = inner.queryable
        self.key_window = inner.key_window
        self.max_inflight = inner.max_inflight
        self.evidence_window = inner.evidence_window
        self.attests_before_acting = inner.attests_before_acting
        self.lookup_needs_key = inner.lookup_needs_key
        self.money = inner.money

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        journal = LocalJournal(self.journal_path)
        try:
            durable = journal.history(effect_id)
        finally:
            journal.close()
        send = SendCall(effect_id, dict(payload), durable)
        self.sends.append(send)

        def deliver() -> SendOutcome:
            send.reached = True
            send.replay = self.inner.times_acted(effect_id) > 0
            return self.inner.send(effect_id, payload)

        return self.calls.call("target.send", deliver, _connection_reset)

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        action = partial(self.inner.lookup, effect_id, payload)
        return self.calls.call("target.lookup", action, _connection_reset)
