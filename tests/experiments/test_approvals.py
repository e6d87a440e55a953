"""The approvals experiment in CI size: forty cases, four racing agent processes, a live
notary on the test database and a payment service that does not dedupe. What the experiment
exists to show is asserted from the ledger and the service's own record: the standing approval
needs a few approvals where per-case needs one per refund, never dispatches over its limit,
never spends past its budget, duplicates nothing, and reconciliation finds every hand refund."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from experiments.approvals import HAND_REFUNDS, LIMIT_CENTS, SEED, compare, simulated_cases
from testkit.paths import child_database_url

pytestmark = pytest.mark.slow


def test_the_approvals_experiment_in_ci_size(transactional_db: None, tmp_path: Path) -> None:
    cases = simulated_cases(40, random.Random(SEED))
    per_case, standing = compare(cases, agents=4, work=tmp_path, database_url=child_database_url())

    over = sum(c.amount > LIMIT_CENTS for c in cases)
    shipping = sum(c.shipping for c in cases)
    assert per_case.approvals == len(cases) + shipping  # one person's decision per refund
    assert standing.approvals == 2 + over  # two standing approvals; over the limit, one each
    assert standing.over_limit == over and standing.over_limit_dispatched_standing == 0
    assert standing.budget_cents is not None
    assert 0 < standing.budget_spent_cents <= standing.budget_cents  # never overspent
    assert standing.refused_by_budget > 0  # the budget was reached, and held
    for arm in (per_case, standing):
        assert arm.duplicates == 0
        assert (arm.hand_refunds, arm.hand_refunds_found) == (HAND_REFUNDS, HAND_REFUNDS)
        assert arm.ambiguous == sum(c.lost for c in cases)
        assert "AMBIGUOUS" not in arm.states  # a person decided each
