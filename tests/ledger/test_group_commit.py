"""Group commit on PostgreSQL: concurrent appends of one process share a transaction and its
commit, and still give one gapless, chained, verifiable log; a refusal in a shared batch undoes
only its own writes; nothing is acknowledged before it is committed (a writer SIGKILLed midway)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection

from ledger import selectors, services
from ledger.models import Entry, Log
from testkit.inbox import wait_for
from testkit.paths import REPO_ROOT, child_database_url

THREADS = 16
PER_THREAD = 25
DEADLINE = 60.0
ACKS_BEFORE_KILL = 300


def in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `target` in a thread with its own connection; its result or exception lands in the
    returned dict."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def transaction_ids(log: Log) -> dict[int, int]:
    """The id of the transaction that inserted each entry, by seq (PostgreSQL's xmin)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT seq, xmin::text::bigint FROM {Entry._meta.db_table} WHERE log_id = %s",
            [log.pk],
        )
        return dict(cursor.fetchall())


def assert_verifies(log: Log, size: int) -> None:
    assert selectors.verify_stored(log=log).entries == size


@pytest.mark.slow
def test_threads_appending_at_once_share_commits_and_leave_one_whole_log(
    transactional_db: None,
) -> None:
    log = services.ensure_log(origin=f"test.interlock.example/group-{os.getpid()}")
    start = threading.Barrier(THREADS)

    def writer(name: str) -> list[int]:
        start.wait()
        return [
            services.append_entry(
                log=log, kind="OBSERVED", body={"writer": name, "n": n}, effect_id=f"{name}-{n}"
            ).seq
            for n in range(PER_THREAD)
        ]

    runs = [in_thread(lambda name=f"t{i}": writer(name)) for i in range(THREADS)]  # type: ignore[misc]
    for thread, _ in runs:
        thread.join(DEADLINE)
    seqs = [seq for _, outcome in runs for seq in outcome["result"]]
    size = THREADS * PER_THREAD
    assert sorted(seqs) == list(range(size))
    assert_verifies(log, size)
    by_seq = {e.seq: e.body_value() for e in selectors.iter_entries(log=log)}
    for _, outcome in runs:  # each writer's entries at the seqs it was told, in its order
        bodies = [by_seq[seq] for seq in outcome["result"]]
        assert [body["n"] for body in bodies] == list(range(PER_THREAD))
        assert len({body["writer"] for body in bodies}) == 1
    assert len(set(transaction_ids(log).values())) < size  # commits were shared


@pytest.mark.slow
def test_a_refusal_in_a_shared_batch_undoes_only_its_own_writes(transactional_db: None) -> None:
    """A batch is held open while four callers queue behind it; the next batch runs all four in
    one transaction, and the one that raises after appending leaves nothing behind."""
    log = services.ensure_log(origin=f"test.interlock.example/refusal-{os.getpid()}")
    held_open, release = threading.Event(), threading.Event()

    def holding(now: datetime) -> int:
        entry = services.append_entry(log=log, kind="OBSERVED", body={"who": "first"})
        held_open.set()
        assert release.wait(DEADLINE)
        return entry.seq

    top_level: dict[str, int] = {}  # the transaction each work ran in, savepoints aside

    def appending(who: str, refuse: bool) -> Callable[[datetime], int]:
        def work(now: datetime) -> int:
            item = services.NewEntry(kind="OBSERVED", body={"who": who})
            [entry] = services.append_entries(log=log, items=[item], created_at=now)
            with connection.cursor() as cursor:
                cursor.execute("SELECT txid_current()")
                top_level[who] = cursor.fetchone()[0]
            if refuse:
                raise services.LedgerInputError(f"{who} refuses after appending")
            return entry.seq

        return work

    first, first_outcome = in_thread(lambda: services.in_log_order(log=log, work=holding))
    assert held_open.wait(DEADLINE)
    queued = [
        in_thread(lambda: services.in_log_order(log=log, work=appending("a", refuse=False))),
        in_thread(lambda: services.in_log_order(log=log, work=appending("b", refuse=True))),
        in_thread(lambda: services.in_log_order(log=log, work=appending("c", refuse=False))),
        in_thread(lambda: services.append_entry(log=log, kind="OBSERVED", body={"who": "d"}).seq),
    ]
    combiner = services._combiners[(connection.alias, log.pk)]
    wait_for(lambda: len(combiner._queue) == len(queued), within=DEADLINE)
    release.set()
    for thread, _ in [(first, first_outcome), *queued]:
        thread.join(DEADLINE)

    assert first_outcome["result"] == 0
    a, b, c, d = (outcome for _, outcome in queued)
    assert isinstance(b["error"], services.LedgerInputError)
    assert (a["result"], c["result"], d["result"]) == (1, 2, 3)
    whos = [e.body_value()["who"] for e in selectors.iter_entries(log=log)]
    assert whos == ["first", "a", "c", "d"]
    assert_verifies(log, 4)
    # The four shared one transaction: the works' own, and the plain append's rows (written
    # outside any savepoint) carry its id.
    assert top_level["a"] == top_level["b"] == top_level["c"] == transaction_ids(log)[3]


@pytest.mark.slow
def test_each_appender_sees_its_own_log_at_the_head_its_batch_left(transactional_db: None) -> None:
    """Three appenders queue behind a held batch, each with its own Log object; whichever leads
    the next batch, every one of them reads the head after its entry, as an append in its own
    transaction would leave it."""
    log = services.ensure_log(origin=f"test.interlock.example/heads-{os.getpid()}")
    held_open, release = threading.Event(), threading.Event()

    def holding(now: datetime) -> None:
        held_open.set()
        assert release.wait(DEADLINE)

    first, _ = in_thread(lambda: services.in_log_order(log=log, work=holding))
    assert held_open.wait(DEADLINE)
    own = [Log.objects.get(pk=log.pk) for _ in range(3)]
    queued = [
        in_thread(lambda mine=mine: services.append_entry(log=mine, kind="OBSERVED", body={}).seq)  # type: ignore[misc]
        for mine in own
    ]
    combiner = services._combiners[(connection.alias, log.pk)]
    wait_for(lambda: len(combiner._queue) == len(queued), within=DEADLINE)
    release.set()
    first.join(DEADLINE)
    for thread, _ in queued:
        thread.join(DEADLINE)

    head = selectors.log_head(log=log)
    assert sorted(outcome["result"] for _, outcome in queued) == [0, 1, 2]
    for mine in own:
        assert (mine.size, bytes(mine.head_hash), bytes(mine.frontier)) == (
            head.size,
            head.head_hash,
            head.frontier,
        )


def test_created_at_outside_a_transaction_is_refused_not_ignored(transactional_db: None) -> None:
    """Only a caller holding the lock knows an instant in log order; outside a transaction the
    batch stamps its entries itself, so an instant given there is refused."""
    log = services.ensure_log(origin=f"test.interlock.example/stamped-{os.getpid()}")
    item = services.NewEntry(kind="OBSERVED", body={})
    with pytest.raises(services.LedgerInputError, match="lock_log"):
        services.append_entries(log=log, items=[item], created_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert selectors.log_head(log=log).size == 0


@pytest.mark.slow
def test_every_acknowledged_append_is_in_the_log_after_the_writer_is_killed(
    transactional_db: None,
) -> None:
    """Eight threads of one process append and print each seq as its append returns; the
    process is SIGKILLed mid-stream. Every seq it printed is in the log with its body."""
    origin = f"test.interlock.example/acked-{os.getpid()}"
    log = services.ensure_log(origin=origin)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "notary.settings",
        "DATABASE_URL": child_database_url(),
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "testkit.agents.ledger_writer", "acked", origin, "8"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    acked: list[tuple[int, str, int]] = []
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "ready\n"
        child.stdin.write("go\n")
        child.stdin.flush()
        while len(acked) < ACKS_BEFORE_KILL:
            line = child.stdout.readline()
            assert line.startswith("acked "), line
            _, acked_seq, acked_writer, acked_n = line.split()
            acked.append((int(acked_seq), acked_writer, int(acked_n)))
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(DEADLINE)

    log.refresh_from_db()
    by_seq = {e.seq: e.body_value() for e in selectors.iter_entries(log=log)}
    for seq, writer, n in acked:
        assert by_seq[seq] == {"writer": writer, "n": n}
    assert log.size >= len(acked)
    assert_verifies(log, log.size)
