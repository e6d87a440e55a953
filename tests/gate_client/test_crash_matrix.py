"""The crash matrix: real agent processes SIGKILLed at every crash point, against a real service.

5 crash points x 4 targets x 4 world changes = 80 cells. In each, a worker process submits one
refund email through the gate and kills itself at the crash point; while it is down the world
changes (or not); a new process runs `recover()`. The outcome each cell must have is written out
below from DESIGN §3, not computed from the gate's code, and what the service did is read from the
service's own store. One checker judges that record; it must pass the gate everywhere and must
fail a plain retry (no gate) exactly where a plain retry does harm, so a passing gate is not a
checker that passes everything."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gate_client.faults import CrashPoint
from testkit.crash_matrix import (
    LOST_RESPONSE,
    PLAIN_VIOLATIONS,
    TARGETS,
    Cell,
    Change,
    Harness,
    LocalJournals,
    gate_problems,
    started_servers,
    violations,
)
from testkit.seed_tables import SEED_EMAIL_TABLE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    directory = tmp_path_factory.mktemp("crash_matrix")
    with started_servers(directory) as servers:
        harness = Harness(servers, directory, LocalJournals(directory))
        try:
            yield harness
        finally:
            harness.close()


# --- the tests -----------------------------------------------------------------------------------
@pytest.mark.parametrize("crash", list(CrashPoint))
def test_every_crash_settles_as_designed_for_every_target_and_world(
    harness: Harness, crash: CrashPoint
) -> None:
    runs = harness.run(
        Cell("gate", crash, target, change) for target in TARGETS for change in Change
    )
    problems = [problem for run in runs.values() for problem in gate_problems(run)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("crash", list(CrashPoint))
def test_the_same_checker_catches_a_plain_retry_exactly_where_it_does_harm(
    harness: Harness, crash: CrashPoint
) -> None:
    runs = harness.run(
        Cell("plain", crash, target, change) for target in TARGETS for change in Change
    )
    exits = {cell.name: run.returncodes for cell, run in runs.items()}
    assert exits == {cell.name: (-9, 0) for cell in runs}
    found = {cell.name: violations(run.observed()) for cell, run in runs.items()}
    assert found == {cell.name: PLAIN_VIOLATIONS[(crash, cell.change)] for cell in runs}


# The seed's published email table (seeds/001) is nine cells of the matrix above.
SEED_SYSTEMS = {"interlock": "T1L", "interlock_noprobe": "T1", "interlock_tier3": "T3"}
SEED_FAULTS = {
    "crash_after_send": (CrashPoint.AFTER_TARGET_ACTED, Change.NONE),
    "refused_before_send": (CrashPoint.AFTER_DISPATCHED, Change.PREMISE_BROKEN),
    "refused_after_send": (CrashPoint.AFTER_TARGET_ACTED, Change.PREMISE_BROKEN),
}


def test_the_seed_email_table_is_a_fixed_point_of_the_matrix(harness: Harness) -> None:
    cells = {}
    for system, fault in SEED_EMAIL_TABLE:
        crash, change = SEED_FAULTS[fault]
        cells[(system, fault)] = Cell("gate", crash, SEED_SYSTEMS[system], change)
    runs = harness.run(cells.values())
    got = {
        key: (runs[cell].recovered[0]["final_state"], len(runs[cell].acts))
        for key, cell in cells.items()
    }
    assert got == SEED_EMAIL_TABLE
    problems = [problem for run in runs.values() for problem in gate_problems(run)]
    assert not problems, "\n".join(problems)


def test_a_response_lost_on_the_wire_is_settled_by_the_process_that_sent_it(
    harness: Harness,
) -> None:
    runs = harness.run(Cell("gate", None, target, Change.NONE) for target in LOST_RESPONSE)
    problems = [problem for run in runs.values() for problem in gate_problems(run)]
    assert not problems, "\n".join(problems)
