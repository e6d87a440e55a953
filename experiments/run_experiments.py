"""Every experiment, one after another: ``make experiments``.

    python experiments/run_experiments.py [--quick] [--only refund|email|coding ...]

Each scenario shows its own progress bar and writes ``experiments/results/<scenario>.md`` (the
table, then the findings) and ``.json`` (every cell). The refund and email scenarios serve a
notary on a fresh PostgreSQL database (``EXPERIMENTS_DATABASE_URL``, see live_notary.py)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments import scenario_coding, scenario_email, scenario_refund
from experiments.harness import RESULTS_DIR, Scenario

SCENARIOS: dict[str, Callable[..., Scenario]] = {
    "refund": scenario_refund.run,
    "email": scenario_email.run,
    "coding": scenario_coding.run,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each scenario's CI-sized subset")
    parser.add_argument("--only", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    started = time.perf_counter()
    for name in args.only:
        at = time.perf_counter()
        scenario = SCENARIOS[name](quick=args.quick, results_dir=args.results_dir)
        violated = sum(not cell.held for cell in scenario.cells)
        print(
            f"{name}: {len(scenario.cells)} cells, {violated} left the world not as wanted, "
            f"{time.perf_counter() - at:.0f} s -> {args.results_dir / name}.md",
            flush=True,
        )
    print(f"all done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
