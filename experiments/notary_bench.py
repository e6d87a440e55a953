"""What the benchmarks of a served notary (bench_notary.py, bench_webhooks.py) share: the bench
database's life, gunicorn serving it, CPU seconds read from /proc, worker processes started
together and their reports, SQL timed as Django runs it, and the statistics and tables they print.

Not a script: the benchmarks import it once they have put the repository on sys.path.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tqdm import tqdm

from experiments.bench_ledger import environment, progress, recreate_database, table
from testkit.notary_server import running_notary

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

# Spawning worker processes on a busy 2-core machine takes seconds; one that never answers must
# not hang the run forever.
START_TIMEOUT = 120.0

P = TypeVar("P")
R = TypeVar("R")


# --- Statistics and formatting ----------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    samples: int
    p50: float
    p99: float
    mean: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Stats:
        return cls(len(seconds), percentile(seconds, 50), percentile(seconds, 99), mean(seconds))


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest rank: the p99 of 500 samples is the 495th smallest."""
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def mean(samples: Sequence[float]) -> float:
    return statistics.fmean(samples) if samples else float("nan")


def duration(seconds: float) -> str:
    if abs(seconds) < 1e-5:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.2f} ms"


def span(values: Sequence[int]) -> str:
    """The values as "3", or "3-5" when they differ; "" for none."""
    if not values:
        return ""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


# --- The bench database and the served notary -------------------------------------------------


def drop_database(database_url: str) -> None:
    name = str(conninfo_to_dict(database_url).get("dbname", ""))
    maintenance = make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextmanager
def bench_database(database_url: str, keep: bool) -> Iterator[None]:
    """The bench database, recreated (Django setup and migrations are the caller's); dropped
    at the end unless `keep`."""
    progress(f"recreating {conninfo_to_dict(database_url).get('dbname')} and migrating")
    recreate_database(database_url)
    try:
        yield
    finally:
        from django.db import connections

        connections.close_all()
        if keep:
            progress("keeping the database (--keep)")
        else:
            progress("dropping the database")
            drop_database(database_url)


def add_server_arguments(parser: argparse.ArgumentParser, default_database_url: str) -> None:
    """--workers, --threads (gunicorn's) and --database-url (the bench database)."""
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument(
        "--threads", type=int, default=8, help="threads per gunicorn worker (default 8)"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", default_database_url),
        help="the bench database, dropped and recreated (default: BENCH_DATABASE_URL or "
        f"{default_database_url})",
    )


def parse_bench_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, profiles: Mapping[str, P]
) -> tuple[argparse.Namespace, P]:
    """Add --keep (the last option), parse `argv`, and pick the quick or the default profile."""
    parser.add_argument("--keep", action="store_true", help="keep the database at the end")
    args = parser.parse_args(argv)
    return args, profiles["quick" if args.quick else "default"]


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
        log = var_dir / "gunicorn.log"
        if log.exists():
            tail = log.read_text(errors="replace").splitlines()[-30:]
            print("gunicorn.log, last lines:\n" + "\n".join(tail), file=sys.stderr)
        raise


def sql_timer(record: Callable[[str, float], None]) -> Callable[..., Any]:
    """A wrapper for connection.execute_wrapper: hands each statement and its execution time
    (a commit not included) to `record`."""

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            record(sql, time.perf_counter() - began)

    return timed


# --- CPU seconds from /proc (Linux) -----------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first), or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of one process so far, or None if it is gone."""
    fields = _stat(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICKS


def _descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def server_cpu(database_url: str) -> tuple[dict[int, float], dict[int, float]]:
    """CPU seconds so far of the gunicorn processes this run started, and of the PostgreSQL
    backends connected to the bench database (when the server runs on this machine)."""
    gunicorn = {
        pid: cpu
        for pid in _descendants(os.getpid())
        if "gunicorn" in _cmdline(pid) and (cpu := process_cpu(pid)) is not None
    }
    name = str(conninfo_to_dict(database_url).get("dbname", ""))
    with psycopg.connect(database_url) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        ]
    backends = {pid: cpu for pid in pids if (cpu := process_cpu(pid)) is not None}
    return gunicorn, backends


def cpu_delta(before: Mapping[int, float], after: Mapping[int, float]) -> float | None:
    """CPU spent between two samples by the processes alive at the second (a process that
    appeared meanwhile counts from zero); None if none could be read."""
    if not after:
        return None
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


# --- Worker processes started together --------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """A worker process is set up and waits for the start signal."""

    process: str


def wait_for_go(name: str, results: Queue[Any], go: Event) -> None:
    """In a worker process: say it is ready, then wait for the start signal."""
    results.put(Ready(name))
    if not go.wait(START_TIMEOUT):
        raise TimeoutError("no start signal")


def collect(results: Queue[Any], count: int, accept: Callable[[Any], bool], who: str) -> None:
    """Read reports until `count` were accepted; an error (a str) or a silence from the `who`
    processes aborts the run."""
    accepted = 0
    while accepted < count:
        try:
            report = results.get(timeout=START_TIMEOUT)
        except queue.Empty as exc:
            article = "an" if who[:1] in "aeiou" else "a"
            raise SystemExit(f"{article} {who} process stopped answering") from exc
        if isinstance(report, str):
            raise SystemExit(f"{who} failed: {report}")
        if accept(report):
            accepted += 1


def collect_ready(results: Queue[Any], count: int, who: str) -> None:
    collect(results, count, lambda report: isinstance(report, Ready), who)


@dataclass(frozen=True)
class Finished(Generic[R]):
    """What the processes of one run sent back, and the CPU the server used meanwhile."""

    results: list[R]
    server_cpu: float | None  # the gunicorn processes
    database_cpu: float | None  # the PostgreSQL backends of the bench database


def go_and_collect(
    results: Queue[Any],
    go: Event,
    count: int,
    kind: type[R],
    *,
    label: str,
    total: int,
    unit: str,
    who: str,
    database_url: str,
) -> Finished[R]:
    """Give the start signal to `count` ready processes and collect their `kind` results, a
    progress bar counting the ints they report on the way up to `total`."""
    before = server_cpu(database_url)
    finished: list[R] = []
    with tqdm(total=total, desc=label, unit=unit, file=sys.stderr) as bar:

        def done(report: Any) -> bool:
            if isinstance(report, int):
                bar.update(report)
            elif isinstance(report, kind):
                finished.append(report)
                return True
            return False

        go.set()
        collect(results, count, done, who)
    after = server_cpu(database_url)
    return Finished(finished, cpu_delta(before[0], after[0]), cpu_delta(before[1], after[1]))


def stop(processes: Sequence[BaseProcess]) -> None:
    for process in processes:
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()


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


# --- What the runs print ----------------------------------------------------------------------


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
    cores = os.cpu_count() or 1
    per = columns.per

    def per_unit(run: LoadRun, cpu: float | None) -> str:
        return "n/a" if cpu is None else f"{cpu / run.count * 1e3:.{columns.digits}f}"

    rows = []
    for run in runs:
        used = run.load_cpu + (run.server_cpu or 0.0) + (run.database_cpu or 0.0)
        rows.append(
            [
                run.label,
                per_unit(run, run.load_cpu),
                per_unit(run, run.server_cpu),
                per_unit(run, run.database_cpu),
                per_unit(run, used),
                f"{used / run.seconds:.2f} of {cores}",
                f"{cores * run.count / used:,.0f}",
            ]
        )
    return table(
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


@dataclass(frozen=True)
class Start:
    """When a run began, and the machine's load then: the Environment table shows it beside the
    load at the end, the last line the run's whole time."""

    at: float = field(default_factory=time.perf_counter)
    load: float = field(default_factory=lambda: os.getloadavg()[0])

    def environment(self, database_url: str) -> list[list[str]]:
        return environment(database_url, self.load)

    def print_total(self) -> None:
        print(f"\nTotal run time {time.perf_counter() - self.at:.0f} s.")


def print_environment(rows: Sequence[Sequence[str]]) -> None:
    print("## Environment\n")
    print(table(["setting", "value"], rows))


def print_goals(rows: Sequence[Sequence[str]]) -> None:
    """The goals section: a table of (goal, measured, verdict) rows, then each in a line."""
    print("\n## Goals\n")
    print(table(["goal", "measured", "verdict"], rows))
    print()
    for goal, measured, verdict in rows:
        print(f"- {goal}: {verdict} ({measured})")
