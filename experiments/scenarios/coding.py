"""Scenario coding: parallel coding agents, the same gate, a different world. How much do
premises see?

Two agents edit one small Python repository (a shop: prices, a cart, an inventory, their tests),
each its own process (experiments/workers/coding_agent.py), each submitting "apply this patch"
through the gate with one kind of premise (the system): none, the hash of every file it read, or
the signatures of the symbols it relies on. Agent A adds ``cart.total()`` and its test; agent B
does something else first, per case (the fault), and the gate re-checks A's premises at dispatch,
after B's edit landed (coding_world.py runs a cell).

    python experiments/run_experiments.py --only coding [--quick] [--results-dir DIR]"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from experiments.kit.cells import Answer, Cell, Declared, RunInfo, Scenario
from experiments.kit.prose import Prose, pick
from experiments.kit.tables import markdown_table
from experiments.scenarios.coding_world import AGENTS, CodingWorld, Observed, coding_world
from experiments.workers import coding_agent
from gate_client.faults import CrashPoint

TEXT = Prose("coding")
SYSTEMS = ("no_premise", "file_hash", "symbols")
ORDERED = (
    "no_conflict",
    "benign_edit_elsewhere",
    "rename",
    "duplicated_work",
    "same_signature_meaning_change",
    "crash_after_commit",
    "crash_before_apply_then_rename",
)
RACES = ("race_benign_edit_elsewhere", "race_rename", "race_same_signature_meaning_change")
CRASHES = {
    "crash_after_commit": CrashPoint.AFTER_TARGET_ACTED,
    "crash_before_apply_then_rename": CrashPoint.AFTER_DISPATCHED,
}
B_EDIT = {
    "no_conflict": "add_low_stock",
    "benign_edit_elsewhere": "skip_empty_lines",
    "rename": "rename_tax_rate",
    "duplicated_work": "add_total_first",
    "same_signature_meaning_change": "tax_rate_as_percent",
    "crash_after_commit": "add_low_stock",
    "crash_before_apply_then_rename": "rename_tax_rate",
    "race_benign_edit_elsewhere": "skip_empty_lines",
    "race_rename": "rename_tax_rate",
    "race_same_signature_meaning_change": "tax_rate_as_percent",
}
# Cases where A's edit is still right after B's: both should land. Elsewhere A's is wrong.
BOTH_RIGHT = {"no_conflict", "benign_edit_elsewhere", "crash_after_commit"}
REPETITIONS = 5
RACE_REPETITIONS = 10


def frame(quick: bool) -> Scenario:
    faults = ORDERED if quick else (*ORDERED, *RACES)
    return Scenario(
        "coding", TEXT["title"], TEXT["intro"], SYSTEMS, faults,
        pick(TEXT.table("faults"), faults), TEXT.table("systems"),
    )  # fmt: skip


def plan(quick: bool) -> list[tuple[tuple[str, ...], list[str]]]:
    """Every ordered case (repeated), then the races; quick: one repetition, no races."""
    races = 0 if quick else RACE_REPETITIONS
    return [(SYSTEMS, [*ORDERED * (1 if quick else REPETITIONS), *RACES * races])]


# --- the judge ---------------------------------------------------------------------------------


def wanted_landings(fault: str, dispatch_order: Sequence[str]) -> dict[str, bool]:
    if fault in BOTH_RIGHT or fault == "race_benign_edit_elsewhere":
        return {"a": True, "b": True}
    if fault.startswith("race_"):
        first = dispatch_order[0] if dispatch_order else "b"
        return {agent: agent == first for agent in AGENTS}
    return {"a": False, "b": True}


def wanted_text(fault: str, wanted: Mapping[str, bool]) -> str:
    if fault.startswith("race_") and fault != "race_benign_edit_elsewhere":
        first = next(agent for agent, lands in wanted.items() if lands).upper()
        return f"the first dispatched ({first}) lands, the other refused; tests pass"
    if all(wanted.values()):
        return "A and B land once each; tests pass"
    return "B lands, A refused; tests pass"


def outcome_text(seen: Observed) -> str:
    names = [agent.upper() for agent in AGENTS if seen.landed[agent]]
    parts = [("+".join(names) or "nothing") + " landed"]
    parts += [f"{a.upper()} committed {len(c)}x" for a, c in seen.commits.items() if len(c) > 1]
    if seen.tests.passed:
        parts.append("tests pass")
    else:
        parts.append(f"tests FAIL ({', '.join(t.split('::')[-1] for t in seen.tests.failed)})")
    parts += [f"{d.split('::')[-1]} defined twice" for d in seen.duplicates]
    return "; ".join(parts)


def answer_vs_truth(seen: Observed) -> Answer:
    happened = {agent: seen.receipts[agent]["happened"] for agent in AGENTS}
    if any(h != "unknown" and h is not seen.landed[a] for a, h in happened.items()):
        return "contradicts"
    if any(h == "unknown" for h in happened.values()):
        return "cannot know (said so)"
    return "matches"


def judge(seen: Observed) -> Cell:
    """The repository is the truth: what landed, its tests, its definitions; the answer is each
    agent's final state in the gate."""
    wanted = wanted_landings(seen.fault, seen.facts["dispatch_order"])
    healthy = seen.tests.passed and not seen.duplicates
    once = all(len(found) <= 1 for found in seen.commits.values())
    states = {agent: seen.receipts[agent]["final_state"] for agent in AGENTS}
    return Cell(
        system=seen.system,
        fault=seen.fault,
        answer=f"A {states['a']}, B {states['b']}",
        outcome=outcome_text(seen),
        wanted=wanted_text(seen.fault, wanted),
        held=seen.landed == wanted and healthy and once,
        answer_vs_truth=answer_vs_truth(seen),
        record_proves_it=seen.proves,
        crash_to_settled_seconds=seen.seconds,
        exit_codes=[run.exit_code for run in seen.runs if run.exit_code is not None],
        ids={
            **{f"effect_{agent}": seen.effects[agent] for agent in AGENTS},
            **{f"lease_{agent}": coding_agent.lease_id(agent) for agent in AGENTS},
            **{f"commit_{agent}": ",".join(seen.commits[agent]) for agent in AGENTS},
        },
        truth={
            "landed": seen.landed,
            "commits": {agent: len(seen.commits[agent]) for agent in AGENTS},
            "tests_passed": seen.tests.passed,
            "tests_summary": seen.tests.summary,
            "tests_failed": seen.tests.failed,
            "duplicate_definitions": seen.duplicates,
            "broken_code_landed": not healthy,
        },
        detail={
            "repetition": seen.repetition,
            "edits": seen.edits,
            "final_states": states,
            "wanted_landed": wanted,
            **seen.facts,
            "processes": [run.role for run in seen.runs],
        },
    )


# --- tables --------------------------------------------------------------------------------------


@dataclass
class Tally:
    cells: int = 0
    held: int = 0
    broken: int = 0
    right_edits_refused: int = 0  # an edit that should have landed was refused
    right_edits: int = 0
    correct_refusals: int = 0
    wrong_edits: int = 0  # an edit that should have been refused
    wrong_edits_landed: int = 0


def tally(cells: Sequence[Cell]) -> Tally:
    """The cells' outcomes, and the edits that could have been refused: A's in the ordered
    cases (B always lands first there, with nothing to re-check), either agent's in a race."""
    t = Tally()
    for cell in cells:
        t.cells += 1
        t.held += cell.held
        t.broken += cell.truth["broken_code_landed"]
        for agent, wanted in cell.detail["wanted_landed"].items():
            if agent != "a" and not cell.fault.startswith("race_"):
                continue
            landed = cell.truth["landed"][agent]
            t.right_edits += wanted
            t.right_edits_refused += wanted and not landed
            t.wrong_edits += not wanted
            t.correct_refusals += not wanted and not landed
            t.wrong_edits_landed += not wanted and landed
    return t


def verdicts(cells: Sequence[Cell]) -> Counter[tuple[str, str, bool]]:
    return Counter(
        (cell.detail["final_states"]["a"], cell.detail["final_states"]["b"], cell.held)
        for cell in cells
    )


def dial_table(scenario: Scenario, repetitions: int) -> str:
    rows = []
    for system in SYSTEMS:
        t = tally(scenario.of(system, ORDERED))
        varied = [f for f in ORDERED if len(verdicts(scenario.of(system, [f]))) > 1]
        repeats = "no: " + ", ".join(varied) if varied else "yes"
        rows.append(
            [
                system,
                f"{t.broken}/{t.cells}",
                f"{t.right_edits_refused}/{t.right_edits}",
                f"{t.correct_refusals}/{t.wrong_edits}",
                f"{t.wrong_edits_landed}/{t.wrong_edits}",
                f"{t.held}/{t.cells}",
                "n/a (one repetition)" if repetitions == 1 else repeats,
            ]
        )
    header = [
        "premise kind",
        "broken code landed (cells)",
        "benign edits refused",
        "correct refusals",
        "wrong edits landed",
        "repository as wanted",
        "same verdicts every repetition",
    ]
    return (
        f"### The dial: every ordered case, {repetitions} repetition(s) each\n\n"
        + markdown_table(header, rows)
        + "\n\n"
        + TEXT["dial_table"]
    )


def case_cell(cells: list[Cell], fault: str) -> str:
    if not cells:
        return "not run"
    parts = [
        f"A {a}, B {b} x{n}" + ("" if held else " (VIOLATED)")
        for (a, b, held), n in verdicts(cells).most_common()
    ]
    if fault.startswith("race_"):
        firsts = Counter((c.detail["dispatch_order"] or ["-"])[0].upper() for c in cells)
        parts.append("first dispatched: " + ", ".join(f"{k} x{v}" for k, v in firsts.items()))
    broken = sum(c.truth["broken_code_landed"] for c in cells)
    parts.append(f"broken code {broken}/{len(cells)}")
    return "; ".join(parts)


def case_table(scenario: Scenario, faults: Sequence[str], title: str) -> str:
    rows = [[f, *(case_cell(scenario.of(s, [f]), f) for s in SYSTEMS)] for f in faults]
    return f"### {title}\n\n" + markdown_table(["case", *SYSTEMS], rows)


def report(scenario: Scenario, run: RunInfo) -> None:
    from experiments.scenarios import coding_findings

    repetitions = 1 if run.quick else REPETITIONS
    scenario.extra_tables += [
        dial_table(scenario, repetitions),
        case_table(scenario, ORDERED, f"Verdicts per case ({repetitions} repetition(s))"),
    ]
    if not run.quick:
        scenario.extra_tables.append(
            case_table(scenario, RACES, f"Racing agents ({RACE_REPETITIONS} races per cell)")
        )
    scenario.findings = coding_findings.findings(scenario)
    scenario.notes = TEXT.list("notes", cells=len(scenario.cells), seconds=run.seconds)


def world(work: Path, database_url: str | None) -> AbstractContextManager[CodingWorld]:
    """No database: the agents' journal is a LocalJournal per cell."""
    return coding_world(work, B_EDIT, CRASHES)


SCENARIO = Declared(name="coding", frame=frame, plan=plan, world=world, judge=judge, report=report)
