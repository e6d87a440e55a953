"""The email experiment in CI size: the two gate rows that answer every fault (interlock and
interlock_notary) on the seed's three faults, and the one cell each where the plain retry and the
idiomatic hand check go wrong, with real SIGKILLed workers, the local Resend and a live notary on
the test database. The outcomes asserted are the ones the experiment exists to show, read from
the cells the scenario scored against Resend's own store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.kit.cells import run
from experiments.scenarios.email import QUICK_CELLS, SCENARIO
from testkit.paths import child_database_url

pytestmark = pytest.mark.slow

GATE_ROWS = ("interlock", "interlock_notary")


def test_the_email_experiment_in_ci_size(transactional_db: None, tmp_path: Path) -> None:
    scenario = run(SCENARIO, quick=True, results_dir=tmp_path, database_url=child_database_url())

    cells = {(c.system, c.fault): c for c in scenario.cells}
    assert set(cells) == {(s, f) for s, faults in QUICK_CELLS.items() for f in faults}
    for cell in cells.values():
        assert cell.exit_codes == [-9, 0], (cell.system, cell.fault, cell.exit_codes)

    # No gate row violates, answers wrong, or leaves a record that does not prove it.
    for (system, fault), cell in cells.items():
        if system in GATE_ROWS:
            assert cell.held, (system, fault, cell.outcome)
            assert cell.answer_vs_truth != "contradicts", (system, fault, cell.answer)
            assert cell.detail["receipt_verified"] == "valid", (system, fault)

    # The plain retry sends "your refund is on the way" for a refund that failed.
    wrong_email = cells[("no_check", "refused_before_send")]
    assert not wrong_email.held and wrong_email.outcome == "1 email"
    # The idiomatic hand check skips after its email already went, and says it did not send.
    skipped = cells[("hand_check_noprobe", "refused_after_send")]
    assert skipped.answer == "SKIPPED:refund_failed" and skipped.outcome == "1 email"
    assert skipped.answer_vs_truth == "contradicts" and not skipped.record_proves_it

    # The notary lifts tier 3: where an email went, Resend's webhook settles it, no person.
    for fault in ("crash_after_send", "refused_after_send"):
        cell = cells[("interlock_notary", fault)]
        assert cell.answer == "COMMITTED_ON_EVIDENCE", (fault, cell.answer)
        assert cell.answer_vs_truth == "matches" and cell.record_proves_it, fault
        assert cell.crash_to_settled_seconds is not None
    # Where none went, no webhook can say so: silence proves nothing, so it is AMBIGUOUS, never
    # a refusal that claims it was not sent (a wrong answer whenever the webhooks are lost).
    unsent = cells[("interlock_notary", "refused_before_send")]
    assert (unsent.answer, unsent.answer_vs_truth) == ("AMBIGUOUS", "cannot know (said so)")
    assert cells[("interlock", "refused_after_send")].answer == "COMMITTED_ON_QUERY"

    # Ground truth is Resend's store: one email where one is wanted, under the cell's ids.
    sent = cells[("interlock_notary", "crash_after_send")]
    assert sent.truth["email_count"] == 1
    [email] = sent.truth["emails"]
    assert {"name": "interlock_effect_id", "value": sent.ids["effect_id"]} in email["tags"]

    markdown = (tmp_path / "email.md").read_text()
    document = json.loads((tmp_path / "email.json").read_text())
    assert len(document["cells"]) == len(cells)
    assert {(c["system"], c["fault"]) for c in document["cells"]} == set(cells)
    for system in QUICK_CELLS:
        assert f"| {system} |" in markdown
    assert "## Findings" in markdown and "Emails: equal" in markdown
