"""What every experiment shares: a cell (one system under one fault, scored against the ground
truth of a service that keeps its own), a progress bar over the cells, and the two result files,
``experiments/results/<scenario>.md`` (the table, then the findings) and ``.json`` (every cell).

A cell's answer is what the system itself reported; its truth is what the service's own store
says happened. "Record proves it" is the seed's definition: the system's own record, read
alone, names what happened and agrees with the ground truth (for a gate, its receipt verifies
against its journal and its ``happened`` equals the truth; for a hand-written check, its log
names the act or the skip and that claim is true). A record that says "cannot know" proves
nothing, honestly."""

from __future__ import annotations

import json
import platform
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

RESULTS_DIR = Path(__file__).resolve().parent / "results"

Answer = Literal["matches", "contradicts", "cannot know (said so)"]


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

    def row_summary(self, system: str) -> str:
        """The seed's one line per system: how often each property held across its cells."""
        mine = [c for c in self.cells if c.system == system]
        n = len(mine)
        settled = [c.crash_to_settled_seconds for c in mine if c.crash_to_settled_seconds]
        median = f"median {statistics.median(settled):.1f}s" if settled else "never settled"
        return (
            f"{system}: {sum(c.held for c in mine)}/{n} left the world as wanted, "
            f"{sum(c.answer_vs_truth == 'matches' for c in mine)}/{n} answers matched the truth, "
            f"{sum(c.answer_vs_truth == 'cannot know (said so)' for c in mine)}/{n} said they "
            f"cannot know, {sum(c.record_proves_it for c in mine)}/{n} left a record that proves "
            f"the outcome, {median} from crash to settled"
        )


def run_cells(
    scenario: Scenario,
    run_cell: Callable[[str, str], Cell],
    *,
    systems: Sequence[str] | None = None,
    faults: Sequence[str] | None = None,
) -> list[Cell]:
    """Every (system, fault) cell in order, with a progress bar on stderr."""
    pairs = [(s, f) for s in (systems or scenario.systems) for f in (faults or scenario.faults)]
    with tqdm(total=len(pairs), desc=scenario.name, unit="cell", file=sys.stderr) as bar:
        for system, fault in pairs:
            bar.set_postfix_str(f"{system} / {fault}")
            scenario.cells.append(run_cell(system, fault))
            bar.update()
    return scenario.cells


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def main_table(scenario: Scenario) -> str:
    systems = [s for s in scenario.systems if any(c.system == s for c in scenario.cells)]
    faults = [f for f in scenario.faults if any(c.fault == f for c in scenario.cells)]
    rows = []
    for system in systems:
        row = [system]
        for fault in faults:
            cell = next((c for c in scenario.cells if (c.system, c.fault) == (system, fault)), None)
            row.append(cell.summary() if cell else "not run")
        rows.append(row)
    return markdown_table(["system", *faults], rows)


def write_results(scenario: Scenario, *, command: str, results_dir: Path = RESULTS_DIR) -> Path:
    """Write <name>.md and <name>.json; return the markdown's path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"Python {platform.python_version()} on {platform.machine()}"
    systems = [s for s in scenario.systems if any(c.system == s for c in scenario.cells)]
    parts = [
        f"# {scenario.title}",
        f"Generated {generated} by `{command}` ({machine}).",
        scenario.intro,
        "## Results",
        main_table(scenario),
        *scenario.extra_tables,
        "\n".join(f"- {scenario.row_summary(s)}" for s in systems),
        "## Findings",
        "\n".join(f"- {finding}" for finding in scenario.findings),
        "## Systems",
        "\n".join(f"- **{s}**: {scenario.system_notes[s]}" for s in systems),
        "## Faults",
        "\n".join(f"- **{f}**: {note}" for f, note in scenario.fault_notes.items()),
    ]
    discarded = [d for c in scenario.cells for d in c.discarded_attempts]
    parts += [
        "## Discarded attempts",
        "\n".join(f"- {d['system']} / {d['fault']}: {d['why']}" for d in discarded)
        if discarded
        else "None in this run.",
    ]
    if scenario.notes:
        parts += ["## Notes", "\n".join(f"- {note}" for note in scenario.notes)]
    markdown = results_dir / f"{scenario.name}.md"
    markdown.write_text("\n\n".join(parts) + "\n")
    document = {
        "scenario": scenario.name,
        "title": scenario.title,
        "generated": generated,
        "command": command,
        "machine": machine,
        "findings": scenario.findings,
        "cells": [asdict(c) for c in scenario.cells],
    }
    (results_dir / f"{scenario.name}.json").write_text(json.dumps(document, indent=1) + "\n")
    return markdown
