"""Leader/follower combining: the waiting work of concurrent callers done in one batch.

A log commits one transaction at a time (its head row is the lock) and every commit waits for the
disk, so callers that each commit alone queue on the lock and the log runs at one disk flush per
entry. Here callers in one process hand their work to the log's Combiner instead: one of them,
the leader, takes the lock, takes every piece of work queued by then (what arrived while it
waited for the lock included), does it all in arrival order, commits once, and only then wakes
each caller with its own result or exception. Whoever queued next leads the next batch, so no
thread keeps serving others while its own caller waits.

What a batch does, and what a result means, is the caller's `lead` function: this module only
orders the callers and hands results back. Plain Python: threads and a lock, nothing else."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

W = TypeVar("W")

_leading = threading.local()  # .combiners: the combiners this thread is leading a batch of


class Turn(Generic[W]):
    """One caller's work and, once its batch is done, what came of it."""

    __slots__ = ("_lead", "_woken", "error", "result", "work")

    def __init__(self, work: W) -> None:
        self.work = work
        self.result: object = None
        self.error: BaseException | None = None
        self._woken = threading.Event()
        self._lead = False

    def outcome(self) -> object:
        if self.error is not None:
            raise self.error
        return self.result


Take = Callable[[], list[Turn[W]]]


class Combiner(Generic[W]):
    """Queues turns and lets one caller at a time lead a batch of them."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._queue: list[Turn[W]] = []
        self._busy = False  # a leader is chosen: leading now, or woken to lead next

    def submit(self, turn: Turn[W], lead: Callable[[Take[W]], None]) -> None:
        """Have `turn` done in a batch; return once it is (turn.outcome() tells how).

        `lead(take)` runs a batch: it calls take() once, when it holds what orders the batch,
        and sets result or error on every turn take() gave it. An exception out of `lead` is the
        error of every turn of its batch: none of them is done."""
        if self in getattr(_leading, "combiners", ()):
            # Work submitted while this thread leads (a commit hook of the batch, say) cannot
            # wait for a batch behind the one it is part of: it is a batch of its own.
            self._run(lambda: [turn], lead, own=turn)
            return
        with self._mutex:
            self._queue.append(turn)
            leads = not self._busy
            self._busy = True
        if not leads:
            turn._woken.wait()
            if not turn._lead:
                return
        self._lead_batch(turn, lead)

    def _lead_batch(self, own: Turn[W], lead: Callable[[Take[W]], None]) -> None:
        def take() -> list[Turn[W]]:
            with self._mutex:
                batch, self._queue = self._queue, []
            return batch

        try:
            self._run(take, lead, own=own)
        finally:
            with self._mutex:
                successor = self._queue[0] if self._queue else None
                self._busy = successor is not None
            if successor is not None:
                successor._lead = True
                successor._woken.set()

    def _run(self, take: Take[W], lead: Callable[[Take[W]], None], *, own: Turn[W]) -> None:
        taken: list[Turn[W]] = []

        def take_once() -> list[Turn[W]]:
            taken.extend(take())
            return taken

        combiners: frozenset[Combiner[W]] = getattr(_leading, "combiners", frozenset())
        _leading.combiners = combiners | {self}
        try:
            lead(take_once)
        except BaseException as exc:
            if own not in taken:  # failed before taking the batch: only its leader's turn fails
                with self._mutex:
                    if own in self._queue:
                        self._queue.remove(own)
                taken.append(own)
            for turn in taken:
                turn.error = exc
        finally:
            _leading.combiners = combiners
            for turn in taken:
                turn._lead = False
                turn._woken.set()
