"""The crash matrix's harness: cells, agent runs against real services, and one judge of a
cell (DESIGN §3 written out as tables), shared by the in-process and the notary matrices."""

from __future__ import annotations

import enum
import json
import secrets
import threading
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.protocol import Happened
from gate_client.receipts import Receipt, ReceiptError, verify_receipt
from gate_client.targets import Tier
from ledger.core.entries import Entry
from testkit.agents import AGENT_PROCESS
from testkit.agents.agent_process import ACTION, LEASE_ID, effect_id
from testkit.peers.reference_service import RunningServer, running_server
from testkit.processes import spawn_armed

ORIGIN = "gate.local/journal"
FIRST_TEXT = "Your refund of $20 is on the way"
SECOND_TEXT = "Your refund of $30 is on the way"  # what the model re-decides during the outage
# The gate declares a max in-flight time that covers its requests' own bound (connect and read,
# REQUEST_TIMEOUT_SECONDS each) with room for a late start: a lost response is noticed at the
# read timeout, and the same process's resend must still start inside the window on a busy
# machine (protocol.late_request refuses one that would start after it).
REQUEST_TIMEOUT_SECONDS = 1.5
MAX_INFLIGHT_SECONDS = 5.0
PARALLEL_CELLS = 8  # mostly process start-up and waits: more than the cores is fine


class Change(enum.StrEnum):
    """How the world moves while the worker is down."""

    NONE = "none"
    LEASE_REVOKED = "lease_revoked"  # the harness revokes the lease in the journal
    PREMISE_BROKEN = "premise_broken"  # the refund turns "failed" in the world file
    REDECIDES = "redecides"  # after recover(), the same case is submitted with another text


@dataclass(frozen=True)
class TargetKind:
    tier: Tier
    queryable: bool  # what the gate is told
    dedupe: bool  # what the service really does
    lookup: bool


TARGETS = {
    "T1": TargetKind(Tier.DEDUPES, queryable=False, dedupe=True, lookup=False),
    "T1L": TargetKind(Tier.DEDUPES, queryable=True, dedupe=True, lookup=True),
    "T2": TargetKind(Tier.LOOKUP, queryable=True, dedupe=False, lookup=True),
    "T3": TargetKind(Tier.NEITHER, queryable=False, dedupe=False, lookup=False),
}

# --- what every cell must come to (DESIGN §3) --------------------------------------------------
# (final state of the receipt recover() prints, times the service acted for the effect).
NOTHING = (None, 0)  # nothing was journaled: recover() prints no receipt
FRESH = (None, 1)  # nothing journaled; the re-decided submit is the first proposal and commits
COMMIT = ("COMMITTED", 1)
RETRY = ("COMMITTED_BY_RETRY", 1)
QUERY = ("COMMITTED_ON_QUERY", 1)
AMB0 = ("AMBIGUOUS", 0)
AMB1 = ("AMBIGUOUS", 1)
REVOKED = ("REFUSED:lease_revoked_at_recovery", 0)
STALE = ("REFUSED:stale_premise_at_recovery", 0)

# Columns are T1, T1L, T2, T3.
EXPECTED: dict[tuple[str, str], tuple[tuple[str | None, int], ...]] = {
    ("before_proposed", "none"): (NOTHING, NOTHING, NOTHING, NOTHING),
    ("before_proposed", "lease_revoked"): (NOTHING, NOTHING, NOTHING, NOTHING),
    ("before_proposed", "premise_broken"): (NOTHING, NOTHING, NOTHING, NOTHING),
    ("before_proposed", "redecides"): (FRESH, FRESH, FRESH, FRESH),
    # The decision is durable and nothing was sent: recovery dispatches it, checked anew.
    ("after_proposed", "none"): (COMMIT, COMMIT, COMMIT, COMMIT),
    ("after_proposed", "lease_revoked"): (REVOKED, REVOKED, REVOKED, REVOKED),
    ("after_proposed", "premise_broken"): (STALE, STALE, STALE, STALE),
    ("after_proposed", "redecides"): (COMMIT, COMMIT, COMMIT, COMMIT),
    # DISPATCHED is durable, the request never left: only a key or a lookup can tell.
    ("after_dispatched", "none"): (RETRY, RETRY, RETRY, AMB0),
    ("after_dispatched", "lease_revoked"): (AMB0, REVOKED, REVOKED, AMB0),
    ("after_dispatched", "premise_broken"): (AMB0, STALE, STALE, AMB0),
    ("after_dispatched", "redecides"): (RETRY, RETRY, RETRY, AMB0),
    # The service acted once and nobody recorded it.
    ("after_target_acted", "none"): (RETRY, RETRY, QUERY, AMB1),
    ("after_target_acted", "lease_revoked"): (AMB1, QUERY, QUERY, AMB1),
    ("after_target_acted", "premise_broken"): (AMB1, QUERY, QUERY, AMB1),
    ("after_target_acted", "redecides"): (RETRY, RETRY, QUERY, AMB1),
    ("after_response", "none"): (RETRY, RETRY, QUERY, AMB1),
    ("after_response", "lease_revoked"): (AMB1, QUERY, QUERY, AMB1),
    ("after_response", "premise_broken"): (AMB1, QUERY, QUERY, AMB1),
    ("after_response", "redecides"): (RETRY, RETRY, QUERY, AMB1),
}
# The re-decided submit, after recover(): the first payload stands (DESIGN §2 rule 2) unless the
# first one was never journaled, in which case the re-decided one is the first proposal.
RESUBMITTED = {
    "before_proposed": "COMMITTED",
    "after_proposed": "REFUSED:payload_changed",
    "after_dispatched": "REFUSED:payload_changed",
    "after_target_acted": "REFUSED:payload_changed",
    "after_response": "REFUSED:payload_changed",
}

# --- the one checker, for any system ------------------------------------------------------------
DOUBLE = "double_effect"
TWO_PAYLOADS = "two_payloads"
AFTER_REVOKE = "acted_after_lease_revoked"
AFTER_PREMISE = "acted_after_premise_broke"
FALSE_CLAIM = "claim_contradicts_service"

# What the checker must find in a plain retry. It POSTs with no key, so even a deduping service
# acts on the resend: the target column does not matter, and is the same for all four.
PLAIN_VIOLATIONS: dict[tuple[str, str], set[str]] = {
    ("before_proposed", "none"): set(),
    ("before_proposed", "lease_revoked"): {AFTER_REVOKE},
    ("before_proposed", "premise_broken"): {AFTER_PREMISE},
    ("before_proposed", "redecides"): set(),  # only the re-decided text ever left
    ("after_proposed", "none"): set(),
    ("after_proposed", "lease_revoked"): {AFTER_REVOKE},
    ("after_proposed", "premise_broken"): {AFTER_PREMISE},
    ("after_proposed", "redecides"): set(),
    ("after_dispatched", "none"): set(),
    ("after_dispatched", "lease_revoked"): {AFTER_REVOKE},
    ("after_dispatched", "premise_broken"): {AFTER_PREMISE},
    ("after_dispatched", "redecides"): set(),
    ("after_target_acted", "none"): {DOUBLE},
    ("after_target_acted", "lease_revoked"): {DOUBLE, AFTER_REVOKE},
    ("after_target_acted", "premise_broken"): {DOUBLE, AFTER_PREMISE},
    ("after_target_acted", "redecides"): {DOUBLE, TWO_PAYLOADS},
    ("after_response", "none"): {DOUBLE},
    ("after_response", "lease_revoked"): {DOUBLE, AFTER_REVOKE},
    ("after_response", "premise_broken"): {DOUBLE, AFTER_PREMISE},
    ("after_response", "redecides"): {DOUBLE, TWO_PAYLOADS},
}


@dataclass(frozen=True)
class Observed:
    """All a checker may look at, the same for every system: the service's own record."""

    change: Change
    acts: list[dict[str, Any]]  # the service's store, this effect only, in order
    acts_before_change: int  # how many of them came before the world changed
    claimed: Happened | None  # what the system says happened; None if it says nothing


def violations(observed: Observed) -> set[str]:
    """Harm done, or a false word about it: never twice, never after the world said stop, never
    another payload, never a claim the service contradicts ("unknown" is honest)."""
    found: set[str] = set()
    if len(observed.acts) > 1:
        found.add(DOUBLE)
    if len({json.dumps(a["payload"], sort_keys=True) for a in observed.acts}) > 1:
        found.add(TWO_PAYLOADS)
    if observed.acts[observed.acts_before_change :]:
        if observed.change == Change.LEASE_REVOKED:
            found.add(AFTER_REVOKE)
        if observed.change == Change.PREMISE_BROKEN:
            found.add(AFTER_PREMISE)
    if observed.claimed not in (None, "unknown") and observed.claimed != bool(observed.acts):
        found.add(FALSE_CLAIM)
    return found


# --- running cells -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    system: str  # "gate", or "plain": the unsafe retry the checker must catch
    crash: CrashPoint | None  # None: no crash, the response is lost on the wire instead
    target: str
    change: Change

    @property
    def name(self) -> str:
        return f"{self.system}/{self.crash or 'lost_response'}/{self.target}/{self.change}"


@dataclass(frozen=True)
class CellJournal:
    """Where one cell's gate keeps its journal, as its agent processes are told."""

    agent_args: list[str]  # the JOURNAL argument, then any notary flags
    effect_id: str
    lease_id: str
    path: Path | None = None  # a local journal's file


class LocalJournals:
    """Each cell's journal is a file of its own, holding its lease too."""

    origin = ORIGIN

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def open_cell(self, case_id: str, target: str) -> CellJournal:
        path = self.directory / f"{case_id}.journal"
        with closing(LocalJournal(path)) as opened:
            expires = datetime.now(UTC) + timedelta(hours=48)
            opened.grant_lease(Lease(LEASE_ID, case_id, ACTION, expires, "support"))
        return CellJournal([str(path)], effect_id(case_id), LEASE_ID, path)

    def revoke(self, journal: CellJournal) -> None:
        assert journal.path is not None
        with closing(LocalJournal(journal.path)) as opened:
            opened.revoke_lease(journal.lease_id, by="finance", reason="the customer disputed it")

    def entries(self, journal: CellJournal) -> tuple[list[Entry], str]:
        assert journal.path is not None
        with closing(LocalJournal(journal.path)) as opened:
            return opened.entries(), ORIGIN


@dataclass(frozen=True)
class CellRun:
    cell: Cell
    journal_entries: list[Entry]  # the whole journal (or notary log) the receipts derive from
    origin: str
    returncodes: tuple[int, int]  # the worker, then the restarted process
    acts: list[dict[str, Any]]  # the service's own record of this effect
    acts_before_change: int
    submitted: dict[str, Any] | None  # the worker's receipt, if it lived to print one
    recovered: list[dict[str, Any]]  # what recover() printed
    resubmitted: dict[str, Any] | None  # the receipt of the re-decided submit
    stderr: str

    def effect_receipt(self) -> dict[str, Any] | None:
        """The receipt that speaks for the effect, not for a refused re-decision."""
        if self.recovered:
            return self.recovered[-1]
        return self.submitted or self.resubmitted

    def observed(self) -> Observed:
        receipt = self.effect_receipt()
        claimed = receipt["happened"] if receipt is not None else None
        return Observed(self.cell.change, self.acts, self.acts_before_change, claimed)


class Journals(Protocol):
    def open_cell(self, case_id: str, target: str) -> CellJournal: ...

    def revoke(self, journal: CellJournal) -> None: ...

    def entries(self, journal: CellJournal) -> tuple[list[Entry], str]: ...


class Harness:
    """Runs cells in parallel, each once per module, each with its own journal and case id."""

    def __init__(
        self, servers: Mapping[str, RunningServer], directory: Path, journals: Journals
    ) -> None:
        self.servers = servers
        self.directory = directory
        self.journals = journals
        self.token = secrets.token_hex(4)  # case ids never repeat, even across test sessions
        self._pool = ThreadPoolExecutor(PARALLEL_CELLS)
        self._lock = threading.Lock()
        self._runs: dict[Cell, Future[CellRun]] = {}

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)

    def run(self, cells: Iterable[Cell]) -> dict[Cell, CellRun]:
        cells = list(cells)
        with self._lock:
            for cell in cells:
                if cell not in self._runs:
                    self._runs[cell] = self._pool.submit(self._run_cell, cell)
        return {cell: self._runs[cell].result() for cell in cells}

    def _run_cell(self, cell: Cell) -> CellRun:
        server = self.servers[cell.target]
        case_id = f"case-{self.token}-{cell.name.replace('/', '-')}"
        world = self.directory / f"{case_id}.world.json"
        set_refund_status(world, "succeeded")
        gated = cell.system == "gate"
        journal = self.journals.open_cell(case_id, cell.target) if gated else None
        effect = journal.effect_id if journal is not None else effect_id(case_id)
        if cell.crash is None:
            server.drop_next_response(effect)
        gate_args = []
        if journal is not None:
            [journal_arg, *notary_flags] = journal.agent_args
            gate_args = [journal_arg, str(world), *self._declared(cell.target), *notary_flags]
        common = ["--url", server.url, "--case", case_id]
        worker = spawn_armed(
            AGENT_PROCESS,
            ["submit" if gated else "plain", *gate_args, *common, "--text", FIRST_TEXT],
            cell.crash,
        )

        acts_before_change = len(server.acts(effect))
        if cell.change == Change.LEASE_REVOKED and journal is not None:  # plain has no lease
            self.journals.revoke(journal)
        elif cell.change == Change.PREMISE_BROKEN:
            set_refund_status(world, "failed")
        text = SECOND_TEXT if cell.change == Change.REDECIDES else FIRST_TEXT

        if gated:
            resubmit = ["--resubmit", text] if cell.change == Change.REDECIDES else []
            restarted = spawn_armed(
                AGENT_PROCESS, ["recover", *gate_args, *common, *resubmit], None
            )
        else:
            restarted = spawn_armed(AGENT_PROCESS, ["plain", *common, "--text", text], None)
        printed = receipts(worker.stdout)
        reprinted = receipts(restarted.stdout)
        entries, origin = self.journals.entries(journal) if journal is not None else ([], "")
        return CellRun(
            cell=cell,
            journal_entries=entries,
            origin=origin,
            returncodes=(worker.returncode, restarted.returncode),
            acts=server.acts(effect),
            acts_before_change=acts_before_change,
            submitted=printed[0][1] if printed else None,
            recovered=[receipt for step, receipt in reprinted if step == "recover"],
            resubmitted=next((receipt for step, receipt in reprinted if step == "submit"), None),
            stderr=worker.stderr + restarted.stderr,
        )

    @staticmethod
    def _declared(target: str) -> list[str]:
        """The target as the gate is told it is."""
        kind = TARGETS[target]
        declared = ["--tier", str(kind.tier.value), "--max-inflight", str(MAX_INFLIGHT_SECONDS)]
        declared += ["--request-timeout", str(REQUEST_TIMEOUT_SECONDS)]
        return declared + (["--queryable"] if kind.queryable else [])


def receipts(stdout: str) -> list[tuple[str, dict[str, Any]]]:
    """(step, receipt) for every receipt a gate process printed; a plain retry prints none."""
    lines = [json.loads(line) for line in stdout.splitlines()]
    return [(line["step"], line["receipt"]) for line in lines if "receipt" in line]


def set_refund_status(world: Path, status: str) -> None:
    """Replace the world file whole, so a premise never reads half of it."""
    partial = world.with_suffix(".tmp")
    partial.write_text(json.dumps({"refund_status": status}))
    partial.replace(world)


@contextmanager
def started_servers(directory: Path) -> Iterator[dict[str, RunningServer]]:
    """One service process per target column, each doing what its column says."""
    with ExitStack() as stack:
        yield {
            name: stack.enter_context(
                running_server(directory / f"{name}.store", dedupe=kind.dedupe, lookup=kind.lookup)
            )
            for name, kind in TARGETS.items()
        }


# --- judging a gate cell -------------------------------------------------------------------------
# A response lost on the wire while the sender lives: HttpTarget raises InDoubt and the same
# process settles the effect by its tier, as recover() would (DESIGN §3); recover() then finds
# nothing left to do. (final state of the worker's receipt, times the service acted)
LOST_RESPONSE: dict[str, tuple[str | None, int]] = {
    "T1": ("COMMITTED_BY_RETRY", 1),
    "T1L": ("COMMITTED_BY_RETRY", 1),
    "T2": ("COMMITTED_ON_QUERY", 1),
    "T3": ("AMBIGUOUS", 1),
}


def gate_problems(run: CellRun) -> list[str]:
    """Everything wrong with one gate cell; an empty list when it came out as designed."""
    problems = [
        *_outcome_problems(run),
        *_resubmit_problems(run),
        *_payload_problems(run),
        *_receipt_problems(run),
    ]
    return [f"{run.cell.name}: {problem}" for problem in problems]


@dataclass(frozen=True)
class _Expectation:
    """What the tables say a gate cell comes to, and the final state it came to: a crashed
    cell's is what recover() printed first, a lost response's what the worker itself printed."""

    state: str | None  # the effect's final state
    acted: int  # times the service acted
    exits: tuple[int, int]  # the worker, then the restarted process
    recovered: list[str]  # the final states recover() prints
    got: str | None

    @classmethod
    def of(cls, run: CellRun) -> _Expectation:
        cell = run.cell
        if cell.crash is None:
            state, acted = LOST_RESPONSE[cell.target]
            got = run.submitted["final_state"] if run.submitted else None
            return cls(state, acted, (0, 0), [], got)
        state, acted = EXPECTED[(cell.crash, cell.change)][list(TARGETS).index(cell.target)]
        got = run.recovered[0]["final_state"] if run.recovered else None
        return cls(state, acted, (-9, 0), [state] if state else [], got)


def _outcome_problems(run: CellRun) -> list[str]:
    """The exit codes, the final state, what recover() printed and how often the service
    acted, against the tables."""
    want = _Expectation.of(run)
    problems = []
    if run.returncodes != want.exits:
        problems.append(
            f"exit codes {run.returncodes}, want {want.exits}; stderr: {run.stderr[-800:]}"
        )
    if want.got != want.state:
        problems.append(f"final state {want.got}, want {want.state}")
    if [r["final_state"] for r in run.recovered] != want.recovered:
        problems.append(f"recover() printed {run.recovered}, want {want.recovered}")
    if len(run.acts) != want.acted:
        problems.append(f"the service acted {len(run.acts)} times, want {want.acted}")
    return problems


def _resubmit_problems(run: CellRun) -> list[str]:
    """A crashed cell whose case is re-decided: the re-decided submit's final state."""
    cell = run.cell
    if cell.crash is None or cell.change != Change.REDECIDES:
        return []
    second = run.resubmitted["final_state"] if run.resubmitted else None
    if second != RESUBMITTED[cell.crash]:
        return [f"the re-decided submit gave {second}, want {RESUBMITTED[cell.crash]}"]
    return []


def _payload_problems(run: CellRun) -> list[str]:
    """The service only ever received the payload that stands: the first journaled one;
    before_proposed journaled none, so there the re-decided one is it."""
    redecided_first = (run.cell.crash, run.cell.change) == ("before_proposed", "redecides")
    standing = SECOND_TEXT if redecided_first else FIRST_TEXT
    sent = [act["payload"]["text"] for act in run.acts]
    if any(text != standing for text in sent):
        return [f"the service received {sent}, want only {standing!r}"]
    return []


def _receipt_problems(run: CellRun) -> list[str]:
    """What the receipts claim, held against the service's own record and the journal: the
    effect's `happened`, every printed receipt verified, and the checker's violations."""
    problems = []
    receipt = run.effect_receipt()
    if receipt is not None and receipt["happened"] not in (bool(run.acts), "unknown"):
        problems.append(f"happened={receipt['happened']!r}, the service acted {len(run.acts)}")
    printed = [run.submitted, *run.recovered, run.resubmitted]
    for data in filter(None, printed):
        try:
            verify_receipt(Receipt.from_dict(data), run.journal_entries, origin=run.origin)
        except ReceiptError as error:
            problems.append(f"receipt does not verify: {error}")
    if found := violations(run.observed()):
        problems.append(f"the checker found {sorted(found)}")
    return problems
