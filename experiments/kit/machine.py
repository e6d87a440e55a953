"""What the figures depend on besides the code: the PostgreSQL server and its durability
settings, this machine's cores and load (other work on it shows in the load average), and the
CPU seconds processes spend, read from /proc (Linux; None where it cannot be read)."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path

import psycopg

from experiments.kit.database import database_name
from experiments.kit.tables import aligned_table

# Read when the benchmark starts (its modules are imported first), shown beside the end's.
LOAD_AT_START = os.getloadavg()[0]
CORES = os.cpu_count() or 1
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def environment(database_url: str | None) -> list[list[str]]:
    """The Environment table's rows: server and durability (with a database), cores, Python,
    and the load average at start and now."""
    rows = []
    if database_url is not None:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version'), "
                "current_setting('synchronous_commit'), current_setting('fsync')"
            ).fetchone()
        version, sync_commit, fsync = row or ("?", "?", "?")
        rows += [
            ["PostgreSQL", version],
            ["synchronous_commit / fsync", f"{sync_commit} / {fsync}"],
        ]
    return [
        *rows,
        ["CPUs", str(os.cpu_count())],
        ["Python", platform.python_version()],
        ["load average (1 min), start / end", f"{LOAD_AT_START:.2f} / {os.getloadavg()[0]:.2f}"],
    ]


def print_environment(rows: Sequence[Sequence[str]]) -> None:
    print("## Environment\n")
    print(aligned_table(["setting", "value"], rows))


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


def descendants(root: int) -> list[int]:
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
        for pid in descendants(os.getpid())
        if "gunicorn" in _cmdline(pid) and (cpu := process_cpu(pid)) is not None
    }
    with psycopg.connect(database_url) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (database_name(database_url),),
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


def machine_busy_seconds() -> float | None:
    """CPU-seconds all cores have spent busy since boot; None if /proc/stat cannot be read."""
    try:
        first_line = Path("/proc/stat").read_text().split("\n", 1)[0]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal (guest time is already counted in user)
    ticks = [int(value) for value in first_line.split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICKS
