"""The scenarios' command line: ``python experiments/run_experiments.py [--quick] [--only ...]
[--results-dir DIR]`` runs each named scenario in turn and says how each went."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from experiments.kit.cells import Declared, run
from experiments.kit.results import RESULTS_DIR


def main(
    scenarios: Mapping[str, Declared], *, description: str, argv: Sequence[str] | None = None
) -> None:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="each scenario's CI-sized subset")
    parser.add_argument("--only", nargs="+", choices=list(scenarios), default=list(scenarios))
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    for name in args.only:
        at = time.perf_counter()
        scenario = run(scenarios[name], quick=args.quick, results_dir=args.results_dir)
        violated = sum(not cell.held for cell in scenario.cells)
        print(
            f"{name}: {len(scenario.cells)} cells, {violated} left the world not as wanted, "
            f"{time.perf_counter() - at:.0f} s -> {args.results_dir / name}.md",
            flush=True,
        )
    print(f"all done in {time.perf_counter() - started:.0f} s")
