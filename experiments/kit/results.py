"""The two result files of a scenario, ``experiments/results/<scenario>.md`` (the table, then
the findings) and ``.json`` (every cell): what a reader checks a finding against."""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from experiments.kit.cells import Scenario
from experiments.kit.stats import median
from experiments.kit.tables import markdown_table

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def main_table(scenario: Scenario) -> str:
    """One row per system, one column per fault: the first cell of each, summarised."""
    systems = [s for s in scenario.systems if scenario.of(s)]
    faults = [f for f in scenario.faults if any(c.fault == f for c in scenario.cells)]
    rows = []
    for system in systems:
        row = [system]
        for fault in faults:
            cell = next((c for c in scenario.cells if (c.system, c.fault) == (system, fault)), None)
            row.append(cell.summary() if cell else "not run")
        rows.append(row)
    return markdown_table(["system", *faults], rows)


def row_summary(scenario: Scenario, system: str) -> str:
    """The seed's one line per system: how often each property held across its cells."""
    mine = scenario.of(system)
    n = len(mine)
    settled = [c.crash_to_settled_seconds for c in mine if c.crash_to_settled_seconds]
    median_line = f"median {median(settled):.1f}s" if settled else "never settled"
    return (
        f"{system}: {sum(c.held for c in mine)}/{n} left the world as wanted, "
        f"{sum(c.answer_vs_truth == 'matches' for c in mine)}/{n} answers matched the truth, "
        f"{sum(c.answer_vs_truth == 'cannot know (said so)' for c in mine)}/{n} said they "
        f"cannot know, {sum(c.record_proves_it for c in mine)}/{n} left a record that proves "
        f"the outcome, {median_line} from crash to settled"
    )


def write_results(scenario: Scenario, *, command: str, results_dir: Path = RESULTS_DIR) -> Path:
    """Write <name>.md and <name>.json; return the markdown's path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"Python {platform.python_version()} on {platform.machine()}"
    systems = [s for s in scenario.systems if scenario.of(s)]
    discarded = [d for c in scenario.cells for d in c.discarded_attempts]
    parts = [
        f"# {scenario.title}",
        f"Generated {generated} by `{command}` ({machine}).",
        scenario.intro,
        "## Results",
        main_table(scenario),
        *scenario.extra_tables,
        "\n".join(f"- {row_summary(scenario, s)}" for s in systems),
        "## Findings",
        "\n".join(f"- {finding}" for finding in scenario.findings),
        "## Systems",
        "\n".join(f"- **{s}**: {scenario.system_notes[s]}" for s in systems),
        "## Faults",
        "\n".join(f"- **{f}**: {note}" for f, note in scenario.fault_notes.items()),
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
