"""What the benchmarks of a served notary (notary, webhooks) share: gunicorn serving the bench
database, load processes started together with the server's CPU counted around them, and the
CPU, environment and goals tables they print."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from experiments.kit.bench import bar, progress
from experiments.kit.database import add_database_argument
from experiments.kit.goals import record_goals
from experiments.kit.machine import CORES, cpu_delta, server_cpu
from experiments.kit.pool import Pool
from experiments.kit.tables import aligned_table
from testkit.notary_server import running_notary

J = TypeVar("J")
R = TypeVar("R")


def add_server_arguments(parser: argparse.ArgumentParser, default_database: str) -> None:
    """--workers, --threads (gunicorn's), --database-url and --keep (the bench database)."""
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument(
        "--threads", type=int, default=8, help="threads per gunicorn worker (default 8)"
    )
    add_database_argument(parser, default_database)


@contextmanager
def serving(
    database_url: str,
    var_dir: Path,
    *,
    workers: int,
    threads: int,
    settings: dict[str, str] | None = None,
) -> Iterator[str]:
    """gunicorn (gthread) serving the notary on the bench database; yields its base URL. If
    anything fails meanwhile, the last lines of its log go to stderr."""
    progress(f"starting gunicorn: {workers} workers x {threads} threads")
    try:
        with running_notary(
            database_url, var_dir, workers=workers, threads=threads, settings=settings
        ) as url:
            yield url
    except BaseException:
        print_server_log(var_dir)
        raise


def print_server_log(var_dir: Path) -> None:
    """The last lines of the served notary's log, to stderr: what it said about a failure."""
    log = var_dir / "gunicorn.log"
    if log.exists():
        tail = log.read_text(errors="replace").splitlines()[-30:]
        print("gunicorn.log, last lines:\n" + "\n".join(tail), file=sys.stderr)


@dataclass(frozen=True)
class Timed(Generic[R]):
    """What the processes of one run sent back, and the CPU the server used meanwhile."""

    results: list[R]
    server_cpu: float | None  # the gunicorn processes
    database_cpu: float | None  # the PostgreSQL backends of the bench database


def timed_run(
    pool: Pool[J, R],
    jobs: Sequence[J | None],
    *,
    label: str,
    unit: str,
    total: int,
    database_url: str,
) -> Timed[R]:
    """Start the jobs together once all are ready and collect their results, a progress bar
    counting their ticks up to `total`; the server's CPU is read just before the start signal
    and after the last result."""
    busy = pool.dispatch(jobs)
    before = server_cpu(database_url)
    with bar(total=total, desc=label, unit=unit) as progress_bar:
        pool.go.set()
        results = pool.results(busy, on_tick=progress_bar.update)
    after = server_cpu(database_url)
    return Timed(results, cpu_delta(before[0], after[0]), cpu_delta(before[1], after[1]))


class Spent(Protocol):
    """What a load process reports of its run: when it started and ended, its CPU seconds."""

    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def cpu(self) -> float: ...


S = TypeVar("S", bound=Spent)


def load_figures(run: Timed[S]) -> dict[str, Any]:
    """A LoadRun's timing and CPU fields for a timed run: the first process's start to the last
    one's end, the processes' CPU, and the server's and database's meanwhile."""
    finished = run.results
    return {
        "seconds": max(r.end for r in finished) - min(r.start for r in finished),
        "load_cpu": sum(r.cpu for r in finished),
        "server_cpu": run.server_cpu,
        "database_cpu": run.database_cpu,
    }


@dataclass(frozen=True)
class LoadRun:
    """One timed run of load processes (agents, clients) started together: how much they did, in
    how long, and the CPU seconds each group of processes spent on it (None: not readable)."""

    label: str
    count: int  # effects or requests
    seconds: float  # the first process's start to the last one's end
    load_cpu: float  # the load's own processes
    server_cpu: float | None  # gunicorn
    database_cpu: float | None  # the PostgreSQL backends of the bench database

    @property
    def per_second(self) -> float:
        return self.count / self.seconds


@dataclass(frozen=True)
class CpuColumns:
    """How cpu_table names its columns, and how precisely it shows the figures."""

    heading: str  # of the first column, the runs' labels
    load: str  # the load's processes: "agents"
    per: str  # the unit of work: "effect"
    rate: str  # its rate: "effects/s"
    digits: int  # decimals of CPU ms per unit


def cpu_table(runs: Sequence[LoadRun], columns: CpuColumns) -> str:
    """CPU per unit of work by process group, and the rate this machine's cores could sustain
    at that cost if nothing else ran (the load's processes included, as they share the machine
    here)."""

    def per_unit(run: LoadRun, cpu: float | None) -> str:
        return "n/a" if cpu is None else f"{cpu / run.count * 1e3:.{columns.digits}f}"

    rows = []
    for run in runs:
        used = run.load_cpu + (run.server_cpu or 0.0) + (run.database_cpu or 0.0)
        cpus = (run.load_cpu, run.server_cpu, run.database_cpu, used)
        rows.append(
            [
                run.label,
                *(per_unit(run, cpu) for cpu in cpus),
                f"{used / run.seconds:.2f} of {CORES}",
                f"{CORES * run.count / used:,.0f}",
            ]
        )
    per = columns.per
    return aligned_table(
        [
            columns.heading,
            f"{columns.load} CPU ms/{per}",
            f"gunicorn CPU ms/{per}",
            f"PostgreSQL CPU ms/{per}",
            f"total CPU ms/{per}",
            "cores busy",
            f"CPU-bound ceiling, {columns.rate}",
        ],
        rows,
    )


def print_goals(rows: Sequence[Sequence[str]]) -> None:
    """The goals section: a table of (goal, measured, verdict) rows, then each in a line; the
    rows are also recorded for make bench's summary (experiments.kit.goals)."""
    record_goals(rows)
    print("\n## Goals\n")
    print(aligned_table(["goal", "measured", "verdict"], rows))
    print()
    for goal, measured, verdict in rows:
        print(f"- {goal}: {verdict} ({measured})")


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"
