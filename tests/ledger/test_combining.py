"""The leader/follower combiner alone: real threads, no database."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ledger.core.combining import Combiner, Take, Turn
from testkit.inbox import wait_for

DEADLINE = 30.0


class Recorder:
    """A `lead` that records each batch and answers each turn with its work doubled; the first
    batch, once taken, waits until `release` is set, so others queue behind it."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = threading.Event()
        self.leading = threading.Event()
        self.mutex = threading.Lock()

    def __call__(self, take: Take[int]) -> None:
        batch = take()
        with self.mutex:
            first = not self.batches
            self.batches.append([turn.work for turn in batch])
        if first:
            self.leading.set()
            assert self.release.wait(DEADLINE)
        for turn in batch:
            turn.result = turn.work * 2


def submit_in_thread(
    combiner: Combiner[int], work: int, lead: Callable[[Take[int]], None]
) -> tuple[threading.Thread, Turn[int]]:
    turn = Turn(work)
    thread = threading.Thread(target=combiner.submit, args=(turn, lead))
    thread.start()
    return thread, turn


def test_work_queued_while_a_batch_leads_is_done_in_one_batch_in_arrival_order() -> None:
    combiner: Combiner[int] = Combiner()
    lead = Recorder()
    first, first_turn = submit_in_thread(combiner, 0, lead)
    assert lead.leading.wait(DEADLINE)
    queued = []
    for work in range(1, 9):
        queued.append(submit_in_thread(combiner, work, lead))
        wait_for(lambda: len(combiner._queue) == len(queued), within=DEADLINE)
    lead.release.set()
    for thread, _ in [(first, first_turn), *queued]:
        thread.join(DEADLINE)
        assert not thread.is_alive()
    assert lead.batches == [[0], [1, 2, 3, 4, 5, 6, 7, 8]]
    assert [turn.outcome() for _, turn in queued] == [2 * w for w in range(1, 9)]
    assert first_turn.outcome() == 0


def test_many_threads_each_get_their_own_result() -> None:
    combiner: Combiner[int] = Combiner()
    lead = Recorder()
    lead.release.set()
    results: dict[int, object] = {}

    def caller(work: int) -> None:
        turn = Turn(work)
        combiner.submit(turn, lead)
        results[work] = turn.outcome()

    threads = [threading.Thread(target=caller, args=(w,)) for w in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    assert results == {w: 2 * w for w in range(64)}
    assert sorted(w for batch in lead.batches for w in batch) == list(range(64))


def test_a_batch_that_fails_fails_every_turn_it_took_and_the_next_leader_goes_on() -> None:
    combiner: Combiner[int] = Combiner()
    gate = Recorder()
    calls: list[list[int]] = []

    def lead(take: Take[int]) -> None:
        batch = take()
        calls.append([turn.work for turn in batch])
        if len(calls) == 1:
            gate.leading.set()
            assert gate.release.wait(DEADLINE)
        if len(calls) == 2:
            for turn in batch:
                turn.result = "written, then lost"
            raise ConnectionError("the commit failed")
        for turn in batch:
            turn.result = turn.work

    first, first_turn = submit_in_thread(combiner, 0, lead)
    assert gate.leading.wait(DEADLINE)
    failing = [submit_in_thread(combiner, w, lead) for w in (1, 2)]
    wait_for(lambda: len(combiner._queue) == 2, within=DEADLINE)
    gate.release.set()
    for thread, _ in [(first, first_turn), *failing]:
        thread.join(DEADLINE)
    after, after_turn = submit_in_thread(combiner, 3, lead)
    after.join(DEADLINE)
    assert first_turn.outcome() == 0
    for _, turn in failing:
        with pytest.raises(ConnectionError, match="commit failed"):
            turn.outcome()
    assert after_turn.outcome() == 3
    assert calls == [[0], [1, 2], [3]]


def test_a_leader_failing_before_it_takes_fails_only_itself() -> None:
    combiner: Combiner[int] = Combiner()
    gate = Recorder()
    attempts: list[int] = []

    def lead(take: Take[int]) -> None:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            gate.leading.set()
            assert gate.release.wait(DEADLINE)
            raise ConnectionError("could not lock the log")
        for turn in take():
            turn.result = turn.work

    first, first_turn = submit_in_thread(combiner, 0, lead)
    assert gate.leading.wait(DEADLINE)
    waiting, waiting_turn = submit_in_thread(combiner, 1, lead)
    wait_for(lambda: len(combiner._queue) == 2, within=DEADLINE)
    gate.release.set()
    first.join(DEADLINE)
    waiting.join(DEADLINE)
    with pytest.raises(ConnectionError):
        first_turn.outcome()
    assert waiting_turn.outcome() == 1  # led by itself next, not failed with the first


def test_work_submitted_by_a_leading_thread_is_a_batch_of_its_own() -> None:
    """A commit hook of a batch submitting to the same log must not wait behind itself."""
    combiner: Combiner[int] = Combiner()
    inner = Turn(7)

    def lead(take: Take[int]) -> None:
        batch = take()
        for turn in batch:
            turn.result = turn.work
        if inner not in batch and inner.result is None:
            combiner.submit(inner, lead)

    outer = Turn(1)
    done = threading.Thread(target=combiner.submit, args=(outer, lead))
    done.start()
    done.join(DEADLINE)
    assert not done.is_alive()
    assert (outer.outcome(), inner.outcome()) == (1, 7)
