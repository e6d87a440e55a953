"""One failure at every call of the protocol, then a restart on the same journal file.

DESIGN §7 and the issue: besides SIGKILLs, fail each durable write and each call of the protocol
(the journal's reads and appends, the lease check, the target call, the premise checks, the
commit) once, restart on the same journal, and never see a dispatch without a durable record or
a second effect. Each run is first made clean to count its calls; every call it makes is then an
injection point, failed by an ordinary exception, a process death, or (for the target) an
in-doubt answer, before the call or after it took effect."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest

from gate_client.gate import Gate
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.protocol import AGENT_VERDICT_KINDS
from gate_client.receipts import Receipt, verify_receipt
from gate_client.targets import Tier
from ledger.core.entries import Entry, EntryKind
from testkit.faulty import (
    EFFECTFUL,
    Calls,
    Failure,
    Fault,
    FaultyJournal,
    FaultyTarget,
)
from testkit.world import ServiceTarget, SimulatedCrash

ORIGIN = "gate.local/journal"
START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

KINDS: dict[str, dict[str, Any]] = {
    "tier1-lookup": {"tier": Tier.DEDUPES, "queryable": True, "dedupes": True},
    "tier1-nolookup": {"tier": Tier.DEDUPES, "queryable": False, "dedupes": True},
    "tier2": {"tier": Tier.LOOKUP, "queryable": True, "dedupes": False, "key_window": None},
    "tier3": {"tier": Tier.NEITHER, "queryable": False, "dedupes": False, "key_window": None},
}


@dataclass(frozen=True)
class Scenario:
    """Which gate call the faulted run makes, and what an earlier process left behind."""

    phase: Literal["submit", "recover"]
    prelude: Fault | None = None  # a submit died here, leaving the effect unfinished
    stale: bool = False  # the refund failed during the outage, before the faulted run


SCENARIOS = {
    "submit": Scenario("submit"),
    "recover-proposed": Scenario("recover", Fault("journal.propose", Failure.CRASH, after=True)),
    "recover-proposed-stale": Scenario(
        "recover", Fault("journal.propose", Failure.CRASH, after=True), stale=True
    ),
    "recover-unsent": Scenario("recover", Fault("target.send", Failure.CRASH)),
    "recover-unsent-stale": Scenario("recover", Fault("target.send", Failure.CRASH), stale=True),
    "recover-acted": Scenario("recover", Fault("target.send", Failure.CRASH, after=True)),
    "recover-acted-stale": Scenario(
        "recover", Fault("target.send", Failure.CRASH, after=True), stale=True
    ),
}


class World:
    """The journal file, the target and its ground truth, and the refund the premise reads."""

    def __init__(self, directory: Path, kind: str) -> None:
        self.path = directory / "effects.journal"
        self.now = START
        self.refund_status = "succeeded"
        self.calls = Calls()
        self.target = FaultyTarget(ServiceTarget(**KINDS[kind]), self.calls, self.path)
        self.opened: list[LocalJournal] = []
        self.gate()
        self.opened[-1].grant_lease(
            Lease("lease_1", "case_1", "email", START + timedelta(hours=48), "support")
        )

    def clock(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def refund(self) -> PremiseResult:
        return PremiseResult(
            self.refund_status in {"succeeded", "pending"}, {"status": self.refund_status}
        )

    def premises(self, proposed: object = None) -> list[Premise]:
        return [self.calls.premise("refund_succeeded_or_pending", self.refund)]

    def proposal(self) -> Proposal:
        return Proposal(
            case_id="case_1",
            target=self.target.name,
            action="email",
            payload={"to": "customer@example.com", "text": "Your refund is on the way"},
            lease_id="lease_1",
            premises=self.premises(),
        )

    def gate(self) -> Gate:
        """A gate as a freshly started process has it: the journal reopened from the file."""
        journal = LocalJournal(self.path, clock=self.clock)
        self.opened.append(journal)
        return Gate(
            FaultyJournal(journal, self.calls),
            {self.target.name: self.target},
            premises_for=self.premises,
            clock=self.clock,
            sleep=self.sleep,
        )

    def run(self, phase: Literal["submit", "recover"], fault: Fault | None) -> BaseException | None:
        """One gate call in a fresh process, failing where `fault` says; what it raised."""
        gate = self.gate()
        self.calls.arm(fault)
        try:
            if phase == "submit":
                gate.submit(self.proposal())
            else:
                gate.recover()
        except (Exception, SimulatedCrash) as exc:
            return exc
        return None

    def prepare(self, scenario: Scenario) -> None:
        if scenario.prelude is not None:
            died = self.run("submit", scenario.prelude)
            assert isinstance(died, SimulatedCrash), f"the prelude did not die: {died!r}"
        if scenario.stale:
            self.refund_status = "failed"

    def durable(self) -> list[Entry]:
        journal = LocalJournal(self.path)
        try:
            return journal.entries()
        finally:
            journal.close()


@contextmanager
def open_world(directory: Path, kind: str) -> Iterator[World]:
    world = World(directory, kind)
    try:
        yield world
    finally:
        for journal in world.opened:
            journal.close()


def clean_trace(kind: str, scenario: Scenario) -> list[str]:
    """The calls the faulted run makes when nothing fails: the injection points."""
    with tempfile.TemporaryDirectory() as directory, open_world(Path(directory), kind) as world:
        world.prepare(scenario)
        world.run(scenario.phase, None)
        return world.calls.log


@dataclass(frozen=True)
class Case:
    kind: str
    scenario: str
    fault: Fault | None  # None: the clean run that was counted
    call: str = ""  # the call the fault fails

    def __str__(self) -> str:
        if self.fault is None:
            return f"{self.kind}-{self.scenario}-clean"
        return f"{self.kind}-{self.scenario}-{self.fault.at:02d}-{self.call}-{self.fault}"


def faults_at(n: int, call: str) -> list[Fault]:
    """Failing after a call differs from failing before it only if the call had an effect."""
    failures = [Failure.ERROR, Failure.CRASH]
    if call == "target.send":
        failures.append(Failure.IN_DOUBT)
    afters = (False, True) if call in EFFECTFUL else (False,)
    return [Fault(n, failure, after) for failure in failures for after in afters]


TRACES = {
    (kind, name): clean_trace(kind, scenario)
    for kind in KINDS
    for name, scenario in SCENARIOS.items()
}


def cases() -> Iterator[Case]:
    for (kind, name), trace in TRACES.items():
        yield Case(kind, name, None)
        for n, call in enumerate(trace, 1):
            for fault in faults_at(n, call):
                yield Case(kind, name, fault, call)


@pytest.mark.parametrize("kind", KINDS)
def test_the_clean_runs_reach_every_call_of_the_protocol(kind: str) -> None:
    """Every call the issue names is an injection point for every tier that makes it."""
    reached = set().union(*(TRACES[kind, name] for name in SCENARIOS))
    expected = {
        "journal.history",
        "journal.receipt_entries",
        "journal.unsettled",
        "journal.propose",
        "journal.propose_and_dispatch",
        "journal.record",
        "journal.dispatch",
        "target.send",
        "premise",
    }
    if KINDS[kind]["queryable"]:
        expected.add("target.lookup")
    assert reached == expected


@pytest.mark.parametrize("case", list(cases()), ids=str)
def test_one_fault_then_a_restart_never_acts_twice_nor_unrecorded(
    case: Case, tmp_path: Path
) -> None:
    """Fail the run at one call, restart on the same file, recover, submit again: then check."""
    with open_world(tmp_path, case.kind) as world:
        scenario = SCENARIOS[case.scenario]
        world.prepare(scenario)
        raised = world.run(scenario.phase, case.fault)
        check_the_failure(world, case, raised)

        gate = world.gate()  # the restart: a fresh gate on the same file, nothing fails
        world.calls.arm(None)
        gate.recover()
        effect_id = world.proposal().effect_id
        history = [e for e in world.durable() if e.effect_id == effect_id]
        recorded = {e.kind for e in history}
        assert not recorded or recorded & AGENT_VERDICT_KINDS, f"recovery left it open: {recorded}"
        sent_before = len(world.target.sends)
        final = gate.submit(world.proposal())
        if recorded:
            assert len(world.target.sends) == sent_before, "an ended effect was sent again"

        check_no_second_effect(world, effect_id)
        check_every_send_was_recorded_first(world)
        check_the_receipt(world, final)


def check_the_failure(world: World, case: Case, raised: BaseException | None) -> None:
    """(d) The fault fired where planned; a death, or a journal failure, ends the call at once."""
    fault = case.fault
    if fault is None:
        assert raised is None, f"the clean run raised {raised!r}"
        return
    assert world.calls.failed_at == fault.at, "the fault did not fire where the trace said"
    if fault.failure == Failure.CRASH:
        assert raised is world.calls.raised, f"the process death was swallowed: {raised!r}"
    if fault.failure == Failure.ERROR and case.call.startswith("journal."):
        assert raised is world.calls.raised, f"a journal failure did not fail closed: {raised!r}"
        after = world.calls.log[fault.at :]
        assert "target.send" not in after, f"sent after the journal failed: {after}"


def check_no_second_effect(world: World, effect_id: str) -> None:
    """(a) The service acted at most once. A deduping service records only its first act, so
    every request that reached it must carry the effect's key and the standing payload, and a
    service that does not dedupe must never be asked again once it acted."""
    service = world.target.inner
    assert service.times_acted(effect_id) <= 1, f"acted twice: {service.acted}"
    standing = dict(world.proposal().payload)
    for send in (s for s in world.target.sends if s.reached):
        assert (send.effect_id, send.payload) == (effect_id, standing), "resent off the key"
        assert service.dedupes or not send.replay, "asked again a service that acts twice"


def check_every_send_was_recorded_first(world: World) -> None:
    """(b) At each send the file already held a DISPATCHED of its own attempt, not yet ended,
    whose premises held."""
    attempts = []
    for number, send in enumerate(world.target.sends, 1):
        dispatches = [e for e in send.durable if e.kind == EntryKind.DISPATCHED]
        on_disk = [e.kind for e in send.durable]
        assert dispatches, f"send {number} without a durable DISPATCHED: {on_disk}"
        last = dispatches[-1]
        ended = [e.kind for e in send.durable if e.seq > last.seq and e.kind in AGENT_VERDICT_KINDS]
        assert not ended, f"send {number} went out after its dispatch ended: {ended}"
        body = last.body_value()
        assert all(p["holds"] for p in body["premises"]), f"send {number}: premises failed"
        attempts.append(body["attempt"])
    assert attempts == sorted(set(attempts)), f"two sends under one attempt: {attempts}"


def check_the_receipt(world: World, final: Receipt) -> None:
    """(c) The effect ended; its receipt verifies against the file and tells the truth."""
    assert final.final_state not in {"PROPOSED", "DISPATCHED"}, final.final_state
    verify_receipt(final, world.durable(), origin=ORIGIN)
    acted = world.target.inner.times_acted(final.effect_id) == 1
    assert final.happened in (acted, "unknown"), f"{final.final_state} but acted={acted}"
    assert final.authorized_when_fired is not False, "fired without a live lease"
    assert final.assumptions_held is not False, "fired on a failed premise"
