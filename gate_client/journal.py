"""Journals: where the gate writes each decision durably before it acts.

`Journal` is the protocol the gate speaks; `LocalJournal` is the embedded default, an append-only
file of ledger entries (one canonical JSON leaf per line), hash-chained by the ledger core and
fsync'd before any method returns. The notary-backed journal speaks the same protocol over HTTP.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache, partial
from pathlib import Path
from typing import Any, Protocol

from gate_client import holds
from gate_client.authorization import DispatchRequest, Fire, Held, Refuse, authorize
from gate_client.budgets import spends_before, spent_in
from gate_client.leases import Lease, LeaseState, lease_states
from gate_client.protocol import Answer, TargetDeclaration, admit, last_attempt, standing
from gate_client.targets import Unknown
from ledger.core.canonical import canonical_json
from ledger.core.entries import (
    Entry,
    EntryError,
    EntryKind,
    entry_from_leaf,
    genesis_hash,
    seal_entry,
)


class JournalError(Exception):
    """The journal cannot be read or written; the gate must not act."""


class JournalCorruptError(JournalError):
    def __init__(self, seq: int, reason: str) -> None:
        super().__init__(f"journal entry {seq}: {reason}")
        self.seq = seq


class AttemptTaken(JournalError):
    """Another process already recorded this dispatch attempt (compare-and-set lost)."""

    def __init__(self, effect_id: str, attempt: int, current: int) -> None:
        super().__init__(f"{effect_id}: attempt {attempt} asked, attempt {current} recorded")
        self.current = current


# The one agent a local journal serves: its budgets per agent key count every spend as its own.
LOCAL_SPENDER = ""


class LeaseRefused(JournalError):
    """The lease did not cover the dispatch at the instant it was to be recorded."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class EffectHeld(JournalError):
    """A new effect was not dispatched: another effect of its case waits for a person
    (gate_client.holds). Its PROPOSED stands and its HELD entry names `held_by`."""

    def __init__(self, held_by: str, detail: str) -> None:
        super().__init__(detail)
        self.held_by = held_by
        self.detail = detail


class Journal(Protocol):
    def record(self, *, kind: EntryKind, effect_id: str, body: Mapping[str, Any]) -> Entry:
        """Append one entry; return only once it is durable. A verdict is admitted by the
        protocol's precedence (`protocol.admit`): when one stands, the standing one is returned."""
        ...

    def propose(self, *, effect_id: str, body: Mapping[str, Any]) -> Entry:
        """Record PROPOSED unless the effect has one already; return the effect's first
        PROPOSED. Atomic, so two agents submitting one effect at once agree on which payload
        stands."""
        ...

    def dispatch(self, request: DispatchRequest) -> Entry:
        """Atomically check the lease and record DISPATCHED attempt `request.attempt`.

        Raises LeaseRefused (nothing recorded) if the lease does not cover it now,
        AttemptTaken if attempt - 1 is not the last recorded attempt, and EffectHeld (HELD
        recorded, once per hold) if a new effect of a case is held (gate_client.holds)."""
        ...

    def propose_and_dispatch(
        self, *, effect_id: str, body: Mapping[str, Any], request: DispatchRequest
    ) -> tuple[list[Entry], Entry | None] | None:
        """propose(), then dispatch() of attempt 1 if the standing proposal is this one and
        nothing was dispatched or settled, as one atomic step: the effect's entries afterwards
        and the DISPATCHED it recorded, if any. LeaseRefused leaves the PROPOSED recorded,
        EffectHeld the PROPOSED and its HELD.

        None from a journal that takes the two as separate steps; the gate then makes them."""
        ...

    def history(self, effect_id: str) -> list[Entry]:
        """The effect's entries, in order."""
        ...

    def receipt_entries(self, effect_id: str) -> list[Entry]:
        """The entries the effect's receipt derives from: its own and its lease's."""
        ...

    def unsettled(self) -> list[str]:
        """Effects with entries and no verdict yet, oldest first: what recover() settles."""
        ...

    def lease_state(self, lease_id: str) -> LeaseState | None: ...

    def target_declaration(self, name: str) -> TargetDeclaration | None:
        """What the journal's keeper holds as the target's declaration (the notary's target
        record), which the gate's adapter must match; None from a journal that keeps none."""
        ...

    def evidence(self, effect_id: str) -> Answer:
        """What the evidence held with the journal says of the effect, as facts: Found (it was
        done), Negative (it was not), Intent (a write-ahead attestation and nothing after),
        NotFound (nothing seen), Unknown (a journal that holds no evidence). Whether silence
        counts is the protocol's to decide, never the journal's."""
        ...


def utc_now() -> datetime:
    return datetime.now(UTC)


class LocalJournal:
    """An append-only, fsync'd, hash-chained file; safe for several processes on one machine and
    for several threads sharing one instance.

    Every operation holds an exclusive flock while it reads what other processes appended and
    writes its own entry, so check-then-append (the lease check, the attempt compare-and-set) is
    atomic across processes. A line without its newline is a write that a crash cut short before
    its fsync returned, so nobody acted on it: the next writer truncates it.

    `hold_scope` is which new effects an effect waiting for a person holds (gate_client.holds),
    as a tenant of the notary chooses it."""

    def __init__(
        self,
        path: str | Path,
        *,
        origin: str = "gate.local/journal",
        clock: Callable[[], datetime] = utc_now,
        hold_scope: holds.HoldScope = holds.DEFAULT_HOLD_SCOPE,
    ) -> None:
        self.path = Path(path)
        self.origin = origin
        self._clock = clock
        self.hold_scope = hold_scope
        self._entries: list[Entry] = []
        self._offset = 0
        self._thread_lock = threading.Lock()
        created = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        if created:
            # The new file's directory entry must be durable too.
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        with self._locked():
            pass

    def close(self) -> None:
        os.close(self._fd)

    # --- reading ---------------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        with self._locked():
            return list(self._entries)

    def history(self, effect_id: str) -> list[Entry]:
        with self._locked():
            return [e for e in self._entries if e.effect_id == effect_id]

    def receipt_entries(self, effect_id: str) -> list[Entry]:
        return self.entries()

    def unsettled(self) -> list[str]:
        with self._locked():
            by_effect: dict[str, list[Entry]] = {}
            for entry in self._entries:
                if entry.effect_id:
                    by_effect.setdefault(entry.effect_id, []).append(entry)
        return [
            effect_id for effect_id, history in by_effect.items() if standing(history).state is None
        ]

    def lease_state(self, lease_id: str) -> LeaseState | None:
        with self._locked():
            return lease_states(self._entries).get(lease_id)

    def target_declaration(self, name: str) -> None:
        """A local journal keeps no declarations: the adapter's own stands."""
        return None

    def evidence(self, effect_id: str) -> Unknown:
        return Unknown("a local journal holds no evidence: no webhooks reach it")

    # --- writing ---------------------------------------------------------------------------

    def record(self, *, kind: EntryKind, effect_id: str, body: Mapping[str, Any]) -> Entry:
        """Append `kind`, by the protocol's precedence: a verdict offered when a final one
        stands returns the standing one, and is kept as evidence when it contradicts it."""
        with self._locked():
            history = [e for e in self._entries if e.effect_id == effect_id]
            admission = admit(history, kind, body)
            if admission.action == "record":
                return self._append(kind, effect_id, body)
            if admission.evidence is not None:
                self._append(EntryKind.OBSERVED, effect_id, admission.evidence)
            assert admission.standing is not None  # only a standing verdict turns one away
            return admission.standing

    def propose(self, *, effect_id: str, body: Mapping[str, Any]) -> Entry:
        with self._locked():
            for entry in self._entries:
                if entry.effect_id == effect_id and entry.kind == EntryKind.PROPOSED:
                    return entry
            return self._append(EntryKind.PROPOSED, effect_id, body)

    def grant_lease(self, lease: Lease) -> Entry:
        with self._locked():
            if lease.lease_id in lease_states(self._entries):
                raise JournalError(f"lease {lease.lease_id} was granted already")
            return self._append(EntryKind.LEASE_GRANTED, "", lease.body())

    def revoke_lease(self, lease_id: str, *, by: str, reason: str) -> Entry:
        with self._locked():
            if lease_id not in lease_states(self._entries):
                raise JournalError(f"no lease {lease_id} to revoke")
            body = {"lease_id": lease_id, "by": by, "reason": reason}
            return self._append(EntryKind.LEASE_REVOKED, "", body)

    def propose_and_dispatch(
        self, *, effect_id: str, body: Mapping[str, Any], request: DispatchRequest
    ) -> None:
        """Separate steps: each costs an fsync, not a round trip, and the moment between them
        stays one the crash matrix can stop a process at."""
        return None

    def dispatch(self, request: DispatchRequest) -> Entry:
        with self._locked():
            history = [e for e in self._entries if e.effect_id == request.effect_id]
            current = last_attempt(history)
            if request.attempt != current + 1 or standing(history).state is not None:
                raise AttemptTaken(request.effect_id, request.attempt, current)
            now = self._clock()
            # The lease's spends are read only if it has budgets, once for all of them: every
            # dispatch of the journal need not replay every effect.
            spends = cache(
                partial(
                    spends_before, self._entries, lease_id=request.lease_id, seq=len(self._entries)
                )
            )
            decision = authorize(
                request=request,
                lease=lease_states(self._entries).get(request.lease_id),
                now=now,
                spender=LOCAL_SPENDER,
                spent_for=lambda budget: spent_in(spends(), budget, now=now, spender=LOCAL_SPENDER),
                hold=partial(self._hold, history, request),
            )
            if isinstance(decision, Refuse):
                raise LeaseRefused(decision.reason, decision.detail)
            if isinstance(decision, Held):
                if not holds.recorded(history, decision.hold):
                    self._append(EntryKind.HELD, request.effect_id, decision.hold.body())
                raise EffectHeld(decision.hold.held_by, decision.hold.detail)
            assert isinstance(decision, Fire)
            return self._append(
                EntryKind.DISPATCHED, request.effect_id, decision.body, created_at=now
            )

    def _hold(self, history: list[Entry], request: DispatchRequest) -> holds.Hold | None:
        """The hold on this dispatch, if another effect of its case waits for a person."""
        proposed = next((e for e in history if e.kind == EntryKind.PROPOSED), None)
        if proposed is None:
            return None  # nothing proposed to compare: no case, so no hold
        return holds.hold_for(
            self.hold_scope,
            effect_id=request.effect_id,
            proposed=proposed.body_value(),
            attempt=request.attempt,
            history=history,
            candidates=holds.histories(self._entries),
        )

    # --- the file --------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # flock excludes other open files, not other threads sharing this one: they take turns
        # on the thread lock first.
        with self._thread_lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._catch_up()
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _catch_up(self) -> None:
        """Read what was appended since we last looked, checking seq and chain as we go."""
        size = os.fstat(self._fd).st_size
        if size == self._offset:
            return
        data = os.pread(self._fd, size - self._offset, self._offset)
        complete = data.rfind(b"\n") + 1
        for line in data[:complete].splitlines():
            self._entries.append(self._parse(line))
        self._offset += complete
        if complete < len(data):
            os.ftruncate(self._fd, self._offset)
            os.fsync(self._fd)

    def _parse(self, line: bytes) -> Entry:
        seq = len(self._entries)
        try:
            entry = entry_from_leaf(line)
        except EntryError as exc:
            raise JournalCorruptError(seq, str(exc)) from exc
        expected_prev = self._entries[-1].entry_hash if self._entries else genesis_hash(self.origin)
        if entry.seq != seq:
            raise JournalCorruptError(seq, f"holds seq {entry.seq}")
        if entry.prev_hash != expected_prev:
            raise JournalCorruptError(seq, "does not link to the entry before it")
        return entry

    def _append(
        self,
        kind: EntryKind,
        effect_id: str,
        body: Mapping[str, Any],
        *,
        created_at: datetime | None = None,
    ) -> Entry:
        previous = self._entries[-1].entry_hash if self._entries else genesis_hash(self.origin)
        entry = seal_entry(
            seq=len(self._entries),
            kind=kind,
            effect_id=effect_id,
            body=canonical_json(dict(body)),
            created_at=self._clock() if created_at is None else created_at,
            prev_hash=previous,
        )
        line = entry.leaf_bytes() + b"\n"
        written = os.write(self._fd, line)
        if written != len(line):
            raise JournalError(f"short write to {self.path}: {written} of {len(line)} bytes")
        os.fsync(self._fd)
        self._entries.append(entry)
        self._offset += len(line)
        return entry
