"""The coding scenario's --quick subset, end to end: a real git repository per cell, each agent its
own process, SIGKILLs at the gate's crash points, and the repository's own pytest suite run in a
fresh interpreter. The assertions are read from the repository (its tests, its definitions, the
commits carrying each effect id), not from the scenario's prose. No database is used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.kit.cells import Cell, run
from experiments.scenarios import coding as scenario_coding

pytestmark = pytest.mark.slow


def a_state(cell: Cell) -> str:
    state: str = cell.detail["final_states"]["a"]
    return state


def a_landed(cell: Cell) -> bool:
    return bool(cell.truth["landed"]["a"])


def broken(cell: Cell) -> bool:
    return bool(cell.truth["broken_code_landed"])


def test_the_quick_subset_measures_the_premise_dial(tmp_path: Path) -> None:
    scenario = run(scenario_coding.SCENARIO, quick=True, results_dir=tmp_path)
    assert {(c.system, c.fault) for c in scenario.cells} == {
        (s, f) for s in scenario_coding.SYSTEMS for f in scenario_coding.ORDERED
    }
    assert len(scenario.cells) == len(scenario_coding.SYSTEMS) * len(scenario_coding.ORDERED)
    cell = scenario.cell

    # Whatever each gate answered is what the repository shows, and its journal proves it.
    for each in scenario.cells:
        assert each.answer_vs_truth == "matches", (each.system, each.fault, each.answer)
        assert each.record_proves_it, (each.system, each.fault)
        assert each.truth["landed"]["b"], (each.system, each.fault)  # B always goes first
        assert max(each.truth["commits"].values()) == 1, (each.system, each.fault)

    # file_hash never lands broken code, and refuses the benign edit in A's file.
    assert not [c.fault for c in scenario.cells if c.system == "file_hash" and broken(c)]
    benign = cell("file_hash", "benign_edit_elsewhere")
    assert (a_state(benign), a_landed(benign), benign.held) == (
        "REFUSED:stale_premise",
        False,
        False,
    )
    assert cell("file_hash", "no_conflict").held

    # symbols lands the benign edit, refuses the rename and the duplicated work ...
    assert cell("symbols", "benign_edit_elsewhere").held
    assert a_landed(cell("symbols", "benign_edit_elsewhere"))
    for fault in ("rename", "duplicated_work"):
        refused = cell("symbols", fault)
        assert (a_state(refused), a_landed(refused), refused.held) == (
            "REFUSED:stale_premise",
            False,
            True,
        ), fault
    # ... and lands the same-signature meaning change, broken: only the test sees it.
    meaning = cell("symbols", "same_signature_meaning_change")
    assert (a_state(meaning), broken(meaning), meaning.held) == ("COMMITTED", True, False)
    assert meaning.truth["tests_failed"] == ["tests/test_cart.py::test_total"]

    # With no premise, the call to the renamed function lands and the tests fail; the
    # duplicate lands too, and the tests cannot see it, the definitions can.
    rename = cell("no_premise", "rename")
    assert (a_state(rename), broken(rename), rename.truth["tests_passed"]) == (
        "COMMITTED",
        True,
        False,
    )
    duplicate = cell("no_premise", "duplicated_work")
    assert duplicate.truth["tests_passed"]
    assert duplicate.truth["duplicate_definitions"] == ["shop/cart.py::total"]

    # Crashes: killed after its commit, A is settled by the lookup and committed once; killed
    # before applying, its recovery re-checks, and only no_premise resends into the rename.
    for system in scenario_coding.SYSTEMS:
        after = cell(system, "crash_after_commit")
        assert after.exit_codes == [-9, 0, 0], system
        assert (a_state(after), after.truth["commits"]["a"], after.held) == (
            "COMMITTED_ON_QUERY",
            1,
            True,
        ), system
        before = cell(system, "crash_before_apply_then_rename")
        assert before.exit_codes == [-9, 0, 0], system
        want = (
            "COMMITTED_BY_RETRY" if system == "no_premise" else "REFUSED:stale_premise_at_recovery"
        )
        assert (a_state(before), broken(before)) == (want, system == "no_premise"), system

    # The result files: the table, the dial, the findings; the JSON holds every cell.
    markdown = (tmp_path / "coding.md").read_text()
    for heading in ("## Results", "### The dial", "## Findings", "## Notes"):
        assert heading in markdown
    document = json.loads((tmp_path / "coding.json").read_text())
    assert len(document["cells"]) == len(scenario.cells)
    assert document["findings"] == scenario.findings
