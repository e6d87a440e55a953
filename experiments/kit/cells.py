"""What every scenario shares: a cell (one system under one fault, scored against the ground
truth of a service that keeps its own), a scenario declared as data, and the engine that runs any
scenario declared that way, with a progress bar over its cells.

A cell's answer is what the system itself reported; its truth is what the service's own store
says happened. "Record proves it" is the seed's definition: the system's own record, read
alone, names what happened and agrees with the ground truth (for a gate, its receipt verifies
against its journal and its ``happened`` equals the truth; for a hand-written check, its log
names the act or the skip and that claim is true). A record that says "cannot know" proves
nothing, honestly."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from tqdm import tqdm

from experiments.kit.stats import median

Answer = Literal["matches", "contradicts", "cannot know (said so)"]
CELL_TIMEOUT_SECONDS = 240  # a cell run in a pool: long past any cell's own timeouts


@dataclass
class Cell:
    system: str
    fault: str
    answer: str  # what the system itself reported: a final state, a logged verdict
    outcome: str  # the ground truth in a few words ("1 email", "2 refunds, $40.00")
    wanted: str  # what the fault wants the world to end as
    held: bool  # the world ended as wanted
    answer_vs_truth: Answer
    record_proves_it: bool
    crash_to_settled_seconds: float | None  # None: it never settled (a person must)
    exit_codes: list[int]  # every process of the cell, in order; -9 is a SIGKILL
    ids: dict[str, str] = field(default_factory=dict)
    truth: dict[str, Any] = field(default_factory=dict)  # read from the service's own store
    discarded_attempts: list[dict[str, Any]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        held = "held" if self.held else f"VIOLATED ({self.outcome}, want {self.wanted})"
        seconds = (
            "never settled"
            if self.crash_to_settled_seconds is None
            else f"{self.crash_to_settled_seconds:.1f}s"
        )
        proves = "yes" if self.record_proves_it else "no"
        answer = self.answer_vs_truth if self.answer_vs_truth != "matches" else "matches truth"
        return (
            f"{self.answer}; {self.outcome} (want {self.wanted}); {held}; answer {answer}; "
            f"record proves it: {proves}; {seconds}"
        )


@dataclass
class Scenario:
    """A run's results: what the result files are written from."""

    name: str
    title: str
    intro: str  # what one cell is, in prose
    systems: Sequence[str]
    faults: Sequence[str]
    fault_notes: Mapping[str, str]  # fault -> what happens and what is wanted
    system_notes: Mapping[str, str]  # system -> what it is
    cells: list[Cell] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # ground truth, what is emulated, caveats
    extra_tables: list[str] = field(default_factory=list)  # markdown, after the main table

    def cell(self, system: str, fault: str) -> Cell:
        return next(c for c in self.cells if (c.system, c.fault) == (system, fault))

    def of(self, system: str, faults: Iterable[str] | None = None) -> list[Cell]:
        """The system's cells, in the order they ran (of `faults` only, if given)."""
        wanted = None if faults is None else set(faults)
        return [
            c for c in self.cells if c.system == system and (wanted is None or c.fault in wanted)
        ]

    def ran(self, *systems: str) -> bool:
        return all(self.of(s) for s in systems)

    def rows(self) -> dict[str, Row]:
        """The scenario's systems that ran, each with its cells counted."""
        return {s: Row(s, self.of(s)) for s in self.systems if self.of(s)}


@dataclass
class Row:
    """One system's cells, counted: what the findings and the counts tables read."""

    name: str
    cells: list[Cell]

    @property
    def n(self) -> int:
        return len(self.cells)

    def count(self, test: Callable[[Cell], Any]) -> int:
        return sum(1 for c in self.cells if test(c))

    @property
    def violations(self) -> int:
        return self.count(lambda c: not c.held)

    @property
    def matches(self) -> int:
        return self.count(lambda c: c.answer_vs_truth == "matches")

    @property
    def contradicts(self) -> int:
        return self.count(lambda c: c.answer_vs_truth == "contradicts")

    @property
    def unknown(self) -> int:
        return self.count(lambda c: c.answer_vs_truth == "cannot know (said so)")

    @property
    def proves(self) -> int:
        return self.count(lambda c: c.record_proves_it)

    @property
    def to_a_person(self) -> int:
        return self.count(lambda c: c.crash_to_settled_seconds is None)

    def settled(self) -> list[float]:
        return [c.crash_to_settled_seconds for c in self.cells if c.crash_to_settled_seconds]

    def median(self) -> float | None:
        times = self.settled()
        return median(times) if times else None

    def seconds(self) -> str:
        times = self.settled()
        if not times:
            return "never settled"
        return f"{median(times):.2f} s (max {max(times):.2f} s)"


@dataclass(frozen=True)
class RunInfo:
    """How the run went, for the notes: its size, its time, the machine's load when it began."""

    quick: bool
    seconds: float
    load_before: float


class World(Protocol):
    """The services of one run; `observe` runs one cell's processes and returns what the judge
    reads (the processes' output and the services' own record)."""

    def observe(self, system: str, fault: str) -> Any: ...


Plan = Sequence[tuple[Sequence[str], Sequence[str]]]  # (systems, faults) products, in order


@dataclass(frozen=True)
class Declared:
    """A scenario as data: its frame (systems, faults, their notes), which cells a run has,
    the world the cells run in, the judge that scores one, and what is written from the cells.
    `parallel` cells run at a time (each then reads the world from a thread of its own)."""

    name: str
    frame: Callable[[bool], Scenario]  # quick -> the empty scenario
    plan: Callable[[bool], Plan]
    world: Callable[[Path, str | None], AbstractContextManager[World]]  # (work dir, database)
    judge: Callable[[Any], Cell]
    report: Callable[[Scenario, RunInfo], None]  # tables, findings and notes, from the cells
    parallel: int = 1
    after_cell: Callable[[], None] = lambda: None  # in the cell's thread, when it is scored


def run(
    declared: Declared,
    *,
    quick: bool = False,
    results_dir: Path | None = None,
    database_url: str | None = None,
) -> Scenario:
    """Run the declared scenario's cells (its CI-sized subset with `quick`), write the result
    files, return the scenario."""
    from experiments.kit.results import RESULTS_DIR, write_results

    scenario = declared.frame(quick)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    with (
        tempfile.TemporaryDirectory(prefix=f"interlock-{declared.name}-") as temp,
        declared.world(Path(temp), database_url) as world,
    ):
        for systems, faults in declared.plan(quick):
            pairs = [(s, f) for s in systems for f in faults]
            scenario.cells += run_cells(declared, world, pairs)
    declared.report(scenario, RunInfo(quick, time.monotonic() - started, load_before))
    command = f"python experiments/run_experiments.py --only {declared.name}"
    command += " --quick" if quick else ""
    write_results(scenario, command=command, results_dir=results_dir or RESULTS_DIR)
    return scenario


def run_cells(declared: Declared, world: World, pairs: Sequence[tuple[str, str]]) -> list[Cell]:
    """Every (system, fault) cell of `pairs`, scored, in order, with a progress bar on stderr."""

    def one(system: str, fault: str) -> Cell:
        try:
            return declared.judge(world.observe(system, fault))
        except Exception as error:
            raise RuntimeError(f"cell {system} / {fault}: {error}") from error
        finally:
            declared.after_cell()

    cells: list[Cell] = []
    with (
        tqdm(total=len(pairs), desc=declared.name, unit="cell", file=sys.stderr) as bar,
        ThreadPoolExecutor(declared.parallel) as pool,
    ):
        futures: list[Future[Cell]] = []
        if declared.parallel > 1:
            futures = [pool.submit(one, s, f) for s, f in pairs]
        try:
            for n, (system, fault) in enumerate(pairs):
                bar.set_postfix_str(f"{system} / {fault}")
                cells.append(
                    futures[n].result(timeout=CELL_TIMEOUT_SECONDS)
                    if futures
                    else one(system, fault)
                )
                bar.update()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return cells
