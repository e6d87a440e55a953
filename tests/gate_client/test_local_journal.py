from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gate_client.authorization import DispatchRequest
from gate_client.faults import CrashPoint
from gate_client.journal import (
    AttemptTaken,
    JournalCorruptError,
    JournalError,
    LeaseRefused,
    LocalJournal,
)
from gate_client.leases import Lease
from ledger.core.entries import Entry, EntryKind, genesis_hash
from testkit.paths import REPO_ROOT
from testkit.processes import spawn_armed
from testkit.world import CENTS_DECLARATION

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LEASE = Lease(
    "lease_1", "case_1", "refund", NOW + timedelta(hours=1), "support", {"amount_cents": 2000}
)

JOURNAL_PROCESS = "testkit.agents.journal_process"


def dispatch(journal: LocalJournal, attempt: int = 1, **overrides: Any) -> Entry:
    arguments: dict[str, Any] = {
        "effect_id": "eff_1",
        "attempt": attempt,
        "lease_id": "lease_1",
        "case_id": "case_1",
        "action": "refund",
        "payload": {"amount_cents": 2000},
        "payload_hash": "h",
        "premises": [],
        "declaration": CENTS_DECLARATION,
    }
    arguments.update(overrides)
    return journal.dispatch(DispatchRequest(**arguments))


def test_entries_survive_reopening_with_their_chain(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal = LocalJournal(path, clock=lambda: NOW)
    first = journal.record(kind=EntryKind.PROPOSED, effect_id="eff_1", body={"amount": 20})
    journal.record(kind=EntryKind.OBSERVED, effect_id="eff_1", body={"result_ref": "re_1"})
    journal.close()
    assert first.prev_hash == genesis_hash("gate.local/journal")
    reopened = LocalJournal(path)
    assert [e.kind for e in reopened.entries()] == ["PROPOSED", "OBSERVED"]
    assert reopened.entries()[0] == first
    lines = path.read_bytes().splitlines()
    assert lines[0] == first.leaf_bytes()


def test_a_torn_last_line_is_dropped_and_the_log_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    journal = LocalJournal(path)
    journal.record(kind=EntryKind.PROPOSED, effect_id="eff_1", body={})
    journal.close()
    whole = path.read_bytes()
    with path.open("ab") as handle:
        handle.write(b'{"body":{"half')  # a write the crash cut short, never fsync-acknowledged
    reopened = LocalJournal(path)
    assert len(reopened.entries()) == 1
    assert path.read_bytes() == whole
    assert reopened.record(kind=EntryKind.OBSERVED, effect_id="eff_1", body={}).seq == 1


@pytest.mark.parametrize("damage", ["edit", "swap", "delete"])
def test_a_damaged_journal_is_refused_naming_the_entry(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "journal"
    journal = LocalJournal(path)
    for n in range(4):
        journal.record(kind=EntryKind.OBSERVED, effect_id="eff_1", body={"n": n})
    journal.close()
    lines = path.read_bytes().splitlines(keepends=True)
    if damage == "edit":
        lines[2] = lines[2].replace(b'"n":2', b'"n":9')
    elif damage == "swap":
        lines[1], lines[2] = lines[2], lines[1]
    else:
        del lines[1]
    path.write_bytes(b"".join(lines))
    with pytest.raises(JournalCorruptError) as failure:
        LocalJournal(path)
    # An edited entry still parses; the next one no longer links to it. (The last line has no
    # successor to give it away: anchoring the head is what the notary's checkpoints are for.)
    assert failure.value.seq == (3 if damage == "edit" else 1)


def test_dispatch_checks_the_lease_atomically_and_counts_attempts(tmp_path: Path) -> None:
    clock = [NOW]
    journal = LocalJournal(tmp_path / "journal", clock=lambda: clock[0])
    with pytest.raises(LeaseRefused) as refused:
        dispatch(journal)
    assert refused.value.reason == "lease_scope"
    assert journal.entries() == []  # a refused dispatch records nothing by itself

    journal.grant_lease(LEASE)
    first = dispatch(journal)
    assert first.kind == EntryKind.DISPATCHED
    assert journal.unsettled() == ["eff_1"]
    with pytest.raises(AttemptTaken):
        dispatch(journal, attempt=1)
    with pytest.raises(AttemptTaken):
        dispatch(journal, attempt=3)

    journal.revoke_lease("lease_1", by="finance", reason="customer disputed")
    with pytest.raises(LeaseRefused, match="lease_revoked"):
        dispatch(journal, attempt=2)
    assert journal.unsettled() == ["eff_1"]  # a refused resend does not end attempt 1
    journal.record(kind=EntryKind.REFUSED, effect_id="eff_1", body={"reason": "payload_changed"})
    assert journal.unsettled() == ["eff_1"]  # refusing another payload settles nothing
    journal.record(kind=EntryKind.AMBIGUOUS, effect_id="eff_1", body={})
    assert journal.unsettled() == []


def test_a_refusal_after_a_dispatch_settles_the_effect(tmp_path: Path) -> None:
    journal = LocalJournal(tmp_path / "journal", clock=lambda: NOW)
    journal.grant_lease(LEASE)
    dispatch(journal)
    journal.record(
        kind=EntryKind.REFUSED, effect_id="eff_1", body={"reason": "stale_premise_at_recovery"}
    )
    assert journal.unsettled() == []


def test_expired_and_over_limit_dispatches_are_refused(tmp_path: Path) -> None:
    clock = [NOW]
    journal = LocalJournal(tmp_path / "journal", clock=lambda: clock[0])
    journal.grant_lease(LEASE)
    with pytest.raises(LeaseRefused, match="lease_scope: amount_cents=3000 exceeds"):
        dispatch(journal, payload={"amount_cents": 3000})
    clock[0] = NOW + timedelta(hours=2)
    with pytest.raises(LeaseRefused, match="lease_expired"):
        dispatch(journal, effect_id="eff_2")


def test_leases_are_granted_once_and_revoked_only_if_they_exist(tmp_path: Path) -> None:
    journal = LocalJournal(tmp_path / "journal")
    journal.grant_lease(LEASE)
    with pytest.raises(JournalError, match="granted already"):
        journal.grant_lease(LEASE)
    with pytest.raises(JournalError, match="no lease"):
        journal.revoke_lease("lease_9", by="x", reason="y")
    assert journal.lease_state("lease_1") is not None
    assert journal.lease_state("lease_1").revoked_at is None  # type: ignore[union-attr]


def _children(path: Path, commands: list[list[str]]) -> list[str]:
    children = [
        subprocess.Popen(
            [sys.executable, "-m", JOURNAL_PROCESS, role, str(path), *rest],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for role, *rest in commands
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outputs = [child.communicate(timeout=60)[0] for child in children]
    assert [child.returncode for child in children] == [0] * len(children)
    return outputs


@pytest.mark.slow
def test_concurrent_writer_processes_leave_one_gapless_chain(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    LocalJournal(path).close()
    _children(path, [["append", f"w{i}", "40"] for i in range(5)])
    entries = LocalJournal(path).entries()  # reopening re-checks every seq and link
    assert [e.seq for e in entries] == list(range(200))
    for writer in range(5):
        mine = [e.body_value()["n"] for e in entries if e.effect_id.startswith(f"w{writer}-")]
        assert mine == list(range(40))


def test_threads_sharing_one_journal_leave_one_gapless_chain(tmp_path: Path) -> None:
    """flock does not exclude threads that share one open file: the journal must."""
    journal = LocalJournal(tmp_path / "journal")

    def write(writer: int) -> None:
        for n in range(40):
            journal.record(kind=EntryKind.OBSERVED, effect_id=f"t{writer}-{n}", body={"n": n})

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(write, range(6)))
    entries = LocalJournal(journal.path).entries()  # reopening re-checks every seq and link
    assert [e.seq for e in entries] == list(range(240))


@pytest.mark.slow
def test_racing_dispatchers_record_exactly_one_attempt(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    LocalJournal(path).grant_lease(
        Lease("lease_1", "case_1", "refund", datetime.now(UTC) + timedelta(hours=1), "support")
    )
    outputs = _children(path, [["dispatch", f"w{i}"] for i in range(6)])
    assert sorted(outputs) == ["lost\n"] * 5 + ["won DISPATCHED\n"]
    dispatched = [e for e in LocalJournal(path).entries() if e.kind == EntryKind.DISPATCHED]
    assert len(dispatched) == 1


@pytest.mark.slow
def test_racing_proposers_agree_on_one_standing_proposal(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    LocalJournal(path).close()
    outputs = _children(path, [["propose", f"w{i}"] for i in range(6)])
    assert len(set(outputs)) == 1  # every process was told the same proposal stands
    proposed = [e for e in LocalJournal(path).entries() if e.kind == EntryKind.PROPOSED]
    assert len(proposed) == 1
    assert outputs[0] == f"standing {proposed[0].body_value()['writer']}\n"


def test_a_crash_point_kills_the_process_with_sigkill_and_the_journal_keeps_what_was_durable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal"
    child = spawn_armed(
        JOURNAL_PROCESS, ["crash", str(path)], CrashPoint.AFTER_PROPOSED, stdin="go\n"
    )
    assert child.returncode == -signal.SIGKILL
    assert "not killed" not in child.stdout
    assert [e.kind for e in LocalJournal(path).entries()] == ["PROPOSED"]

    child = spawn_armed(JOURNAL_PROCESS, ["crash", str(tmp_path / "j2")], None, stdin="go\n")
    assert child.returncode == 0
    assert "not killed" in child.stdout


def test_an_unknown_crash_point_is_a_clear_error(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", "import gate_client.faults"],
        cwd=REPO_ROOT,
        env={**os.environ, "INTERLOCK_CRASH_AT": "sometime"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 1
    assert "INTERLOCK_CRASH_AT='sometime' is not one of" in child.stderr


def _committed(ref: str) -> dict[str, Any]:
    return {"state": "COMMITTED", "attempt": 1, "result_ref": ref, "recheck": None}


def test_a_second_final_verdict_is_refused_as_the_notary_refuses_it(tmp_path: Path) -> None:
    """Rule d: the local journal applies the notary's precedence. The first final verdict
    stands; an answer that contradicts it is kept as evidence, never as a second verdict."""
    journal = LocalJournal(tmp_path / "journal", clock=lambda: NOW)
    journal.grant_lease(LEASE)
    journal.propose(effect_id="eff_1", body={"amount_cents": 2000})
    dispatch(journal)
    first = journal.record(kind=EntryKind.COMMITTED, effect_id="eff_1", body=_committed("re_1"))
    again = journal.record(
        kind=EntryKind.FAILED, effect_id="eff_1", body={"attempt": 1, "code": "declined"}
    )
    assert again == first
    other = journal.record(kind=EntryKind.COMMITTED, effect_id="eff_1", body=_committed("re_2"))
    assert other == first
    kinds = [e.kind for e in journal.history("eff_1")]
    assert kinds == ["PROPOSED", "DISPATCHED", "COMMITTED", "OBSERVED"]
    with pytest.raises(AttemptTaken):
        dispatch(journal, attempt=2)


def test_the_agents_late_answer_settles_an_ambiguous_effect(tmp_path: Path) -> None:
    journal = LocalJournal(tmp_path / "journal", clock=lambda: NOW)
    journal.grant_lease(LEASE)
    journal.propose(effect_id="eff_1", body={"amount_cents": 2000})
    dispatch(journal)
    journal.record(kind=EntryKind.AMBIGUOUS, effect_id="eff_1", body={"recheck": {}})
    late = journal.record(kind=EntryKind.COMMITTED, effect_id="eff_1", body=_committed("re_1"))
    assert late.kind == EntryKind.COMMITTED
    assert journal.record(kind=EntryKind.AMBIGUOUS, effect_id="eff_1", body={}) == late
