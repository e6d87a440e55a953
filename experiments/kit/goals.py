"""Every benchmark's goals in one table: each bench prints its own Goals section, and with
BENCH_GOALS_FILE set it also appends those rows there, so `make bench` can end with all of them
together instead of leaving them scattered through several screens of tables.

    .venv/bin/python -m experiments.kit.goals FILE
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from experiments.kit.machine import LOAD_AT_START
from experiments.kit.tables import aligned_table

GOALS_FILE_VARIABLE = "BENCH_GOALS_FILE"
HEADER = ["bench", "goal", "measured", "verdict", "load, start / end"]


def record_goals(rows: Sequence[Sequence[str]]) -> None:
    """Append this bench's (goal, measured, verdict) rows to BENCH_GOALS_FILE, if it is set."""
    path = os.environ.get(GOALS_FILE_VARIABLE)
    if not path:
        return
    bench = _bench_name()
    load = f"{LOAD_AT_START:.2f} / {os.getloadavg()[0]:.2f}"
    with Path(path).open("a", encoding="utf-8") as out:
        for goal, measured, verdict in rows:
            record = {"bench": bench, "goal": goal, "measured": measured, "verdict": verdict}
            out.write(json.dumps({**record, "load": load}) + "\n")


def _bench_name() -> str:
    """The running bench's module name, experiments.benches.ledger giving "ledger"."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    name = spec.name if spec is not None else Path(sys.argv[0]).stem
    return str(name).rpartition(".")[2]


def summary(path: Path) -> str:
    """The goals recorded in `path` as one table, with how many were met."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    rows = [[r["bench"], r["goal"], r["measured"], r["verdict"], r["load"]] for r in records]
    met = sum(r["verdict"] == "met" for r in records)
    return f"{aligned_table(HEADER, rows)}\n\n{met} of {len(records)} goals met."


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        raise SystemExit("usage: python -m experiments.kit.goals FILE")
    path = Path(args[0])
    if not path.exists():
        raise SystemExit(f"no goals were recorded: {path} does not exist")
    print("\n## Every bench's goals\n")
    print(summary(path))


if __name__ == "__main__":
    main()
