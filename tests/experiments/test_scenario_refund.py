"""The refund scenario's --quick subset, end to end: real workers SIGKILLed at their crash points,
a real payment service per cell, localstripe, and a live notary on the test database. The
assertions are outcomes read from the services' own records, not the scenario's prose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.kit.cells import Cell, Scenario, run
from experiments.scenarios import refund as scenario_refund
from experiments.scenarios.refund_world import REDECIDED_CENTS
from testkit.paths import child_database_url

pytestmark = pytest.mark.slow

REDECIDED = REDECIDED_CENTS


def refunds(cell: Cell) -> list[int]:
    return [r["amount_cents"] for r in cell.truth["agent_refunds"]]


def test_the_quick_subset_shows_what_each_system_does(
    transactional_db: None, tmp_path: Path
) -> None:
    scenario = run(
        scenario_refund.SCENARIO,
        quick=True,
        results_dir=tmp_path,
        database_url=child_database_url(),
    )
    assert isinstance(scenario, Scenario)
    assert {(c.system, c.fault) for c in scenario.cells} == {
        (s, f) for s in scenario_refund.SYSTEMS for f in scenario_refund.QUICK_FAULTS
    }
    # Every first worker really died at its crash point; every restart ran to the end.
    assert {tuple(c.exit_codes) for c in scenario.cells} == {(-9, 0)}

    # No gate row leaves the world other than wanted, or says something the service denies.
    for name in scenario_refund.GATE_ROWS:
        for cell in (c for c in scenario.cells if c.system == name):
            assert cell.held, (name, cell.fault, cell.outcome, cell.answer)
            assert cell.answer_vs_truth != "contradicts", (name, cell.fault, cell.answer)
            assert REDECIDED not in refunds(cell)
            assert not cell.detail["receipt_problems"], cell.detail["receipt_problems"]

    # A plain retry refunds twice once the service has acted; the keys baseline does not ...
    assert refunds(scenario.cell("plain_retry", "after_target_acted+none")) == [2000, 2000]
    assert refunds(scenario.cell("idempotency_keys", "after_target_acted+none")) == [2000]
    # ... but refunds under a revoked lease and after support refunded by hand.
    revoked = scenario.cell("idempotency_keys", "after_dispatched+lease_revoked")
    assert (refunds(revoked), revoked.held) == ([2000], False)
    by_hand = scenario.cell("idempotency_keys", "after_dispatched+refunded_by_hand")
    assert (refunds(by_hand), len(by_hand.truth["refunds_by_hand"]), by_hand.held) == (
        [2000],
        1,
        False,
    )
    # localstripe ignores the key: the same baseline refunds twice there.
    stripe_keys = scenario.cell("idempotency_keys_stripe", "after_target_acted+none")
    assert refunds(stripe_keys) == [2000, 2000]
    # Durable execution re-runs the tool whose result it never checkpointed.
    assert refunds(scenario.cell("durable_execution", "after_target_acted+none")) == [2000, 2000]

    # The gate, by tier, on the crash after the service acted.
    states = {
        name: scenario.cell(name, "after_target_acted+none").answer.split(" (")[0]
        for name in scenario_refund.GATE_ROWS
    }
    assert states == {
        "gate_tier1": "COMMITTED_BY_RETRY",
        "gate_tier2": "COMMITTED_ON_QUERY",
        "gate_tier3": "AMBIGUOUS",
        "gate_tier3_notary": "COMMITTED_ON_EVIDENCE",
        "interlock_attested": "COMMITTED_ON_EVIDENCE",
        "gate_tier2_stripe": "COMMITTED_ON_QUERY",
    }
    tier1 = scenario.cell("gate_tier1", "after_target_acted+none")
    assert tier1.record_proves_it and tier1.crash_to_settled_seconds is not None
    assert scenario.cell("gate_tier3", "after_target_acted+none").crash_to_settled_seconds is None
    redecided = scenario.cell("gate_tier1", "after_target_acted+redecided_30")
    assert redecided.answer.endswith("$30 re-decision: REFUSED:payload_changed")
    for name in ("gate_tier2", "gate_tier2_stripe"):
        stale = scenario.cell(name, "after_dispatched+refunded_by_hand")
        assert stale.answer == "REFUSED:stale_premise_at_recovery", stale.answer

    # Write-ahead attestation: every cell exactly once or refused with nothing sent, each answer
    # the service's truth; no cell left to a person, since every refund was said performed.
    attested = [c for c in scenario.cells if c.system == "interlock_attested"]
    for cell in attested:
        assert len(refunds(cell)) <= 1, (cell.fault, refunds(cell))
        assert cell.answer_vs_truth == "matches", (cell.fault, cell.answer)
        assert cell.crash_to_settled_seconds is not None, (cell.fault, cell.answer)
        assert [a["outcome"] for a in cell.detail["attested"]] == (
            ["intent", "performed"] if refunds(cell) else []
        ), cell.detail["attested"]
    acted = scenario.cell("interlock_attested", "after_target_acted+none")
    assert (refunds(acted), acted.record_proves_it) == ([2000], True)
    assert acted.detail["attested"][1]["reference"] == acted.truth["agent_refunds"][0]["result_ref"]
    # Never sent, known never sent: re-checked at recovery and refused, not AMBIGUOUS.
    for fault, state in (
        ("after_dispatched+lease_revoked", "REFUSED:lease_revoked_at_recovery"),
        ("after_dispatched+refunded_by_hand", "REFUSED:stale_premise_at_recovery"),
    ):
        cell = scenario.cell("interlock_attested", fault)
        assert (cell.answer, refunds(cell)) == (state, []), (fault, cell.answer)
        assert cell.detail["receipt"]["recheck_at_recovery"]["lookup"] == "not_attested"
    redecided = scenario.cell("interlock_attested", "after_target_acted+redecided_30")
    assert redecided.answer.endswith("$30 re-decision: REFUSED:payload_changed"), redecided.answer

    # The files.
    document = json.loads((tmp_path / "refund.json").read_text())
    assert len(document["cells"]) == len(scenario.cells)
    markdown = (tmp_path / "refund.md").read_text()
    assert "| system | after_target_acted+none |" in markdown
    assert "## Findings" in markdown and "Keys are necessary and insufficient" in markdown
    assert "Write-ahead attestation" in markdown
