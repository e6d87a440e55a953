"""Spawned worker processes started together: each sets itself up once (Django, connections),
then runs jobs until closed, and every job waits at a start line until all its peers are ready.

Spawning a dozen Django processes costs seconds of CPU on a small machine, which would dwarf the
measurements, so a pool is made once and reused across configurations. The handshake: a child
sends `Ready` after its setup and again when a job has done its own preparation (`Child.ready`),
and waits there; the parent gives the start signal once every busy child is ready. An exception
in a child goes to the parent as `Failed` rather than leaving it waiting.
"""

from __future__ import annotations

import multiprocessing
import queue
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

J = TypeVar("J")
R = TypeVar("R")

# Spawning 17 Django processes on a busy 2-core machine takes seconds; a child that never
# answers must not hang the run forever.
SILENCE_TIMEOUT = 300.0


@dataclass(frozen=True)
class Ready:
    """A child is set up, or a job is prepared, and waits for the start signal."""

    name: str


@dataclass(frozen=True)
class Failed:
    message: str


@dataclass
class Child:
    """What a job sees of its process: its name, what its setup returned, and the signals."""

    name: str
    state: Any
    go: Event
    stop: Event
    reports: Queue[Any]

    def ready(self) -> None:
        """Say this job is prepared, then wait for the start signal."""
        self.reports.put(Ready(self.name))
        if not self.go.wait(SILENCE_TIMEOUT):
            raise TimeoutError("no start signal")

    def tick(self, done: int) -> None:
        """Report `done` more units of work, for the parent's progress bar."""
        self.reports.put(done)


def _child_main(
    setup: Callable[[], Any] | None,
    run: Callable[[Child, Any], Any],
    inbox: Queue[Any],
    go: Event,
    stop: Event,
    reports: Queue[Any],
) -> None:
    name = multiprocessing.current_process().name
    try:
        child = Child(name, setup() if setup else None, go, stop, reports)
        reports.put(Ready(name))
        while (job := inbox.get()) is not None:
            reports.put(run(child, job))
    except Exception as exc:
        reports.put(Failed(f"{name}: {exc!r}"))


class Pool(Generic[J, R]):
    """`size` spawned processes running `run(child, job)` for each job given them; `setup` (a
    module-level function, or a partial of one) runs once in each before any job."""

    def __init__(
        self,
        size: int,
        run: Callable[[Child, J], R],
        *,
        setup: Callable[[], object] | None = None,
        who: str = "worker",
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self.who = who
        self.go = context.Event()
        self.stop = context.Event()
        self.reports: Queue[Any] = context.Queue()
        self.inboxes: list[Queue[J | None]] = [context.Queue() for _ in range(size)]
        self.processes = [
            context.Process(
                target=_child_main,
                args=(setup, run, inbox, self.go, self.stop, self.reports),
                name=f"{who}-{n}",
                daemon=True,
            )
            for n, inbox in enumerate(self.inboxes)
        ]
        for process in self.processes:
            process.start()
        # No measurement may run while the others are still importing Django.
        self.collect(size, lambda report: isinstance(report, Ready))

    def dispatch(self, jobs: Sequence[J | None]) -> int:
        """Give child n jobs[n] (None: it sits this one out) and wait until each busy child is
        ready at the start line; returns how many are busy."""
        self.go.clear()
        self.stop.clear()
        busy = [(inbox, job) for inbox, job in zip(self.inboxes, jobs, strict=False) if job]
        for inbox, job in busy:
            inbox.put(job)
        self.collect(len(busy), lambda report: isinstance(report, Ready))
        return len(busy)

    def results(self, count: int, *, on_tick: Callable[[int], None] | None = None) -> list[R]:
        """The next `count` results; progress ticks go to `on_tick`."""
        found: list[R] = []

        def accept(report: Any) -> bool:
            if isinstance(report, int):
                if on_tick is not None:
                    on_tick(report)
                return False
            found.append(report)
            return True

        self.collect(count, accept)
        return found

    def run(self, jobs: Sequence[J | None]) -> list[R]:
        """Dispatch the jobs, start them together, and return their results."""
        busy = self.dispatch(jobs)
        self.go.set()
        return self.results(busy)

    def collect(self, count: int, accept: Callable[[Any], bool]) -> None:
        """Read reports until `count` were accepted; a failure or a silence aborts the run."""
        accepted = 0
        while accepted < count:
            try:
                report = self.reports.get(timeout=SILENCE_TIMEOUT)
            except queue.Empty as exc:
                raise SystemExit(f"a {self.who} process stopped answering") from exc
            if isinstance(report, Failed):
                raise SystemExit(f"{self.who} failed: {report.message}")
            accepted += accept(report)

    def close(self) -> None:
        """Stop the children; one still stuck after an abort is terminated."""
        self.stop.set()
        for inbox in self.inboxes:
            inbox.put(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()

    def __enter__(self) -> Pool[J, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
