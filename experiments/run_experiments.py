"""Every experiment, one after another: ``make experiments``.

    python experiments/run_experiments.py [--quick] [--only refund|email|coding ...]
        [--results-dir DIR]

Each scenario (declared in experiments/scenarios/) shows its own progress bar and writes
``experiments/results/<scenario>.md`` (the table, then the findings) and ``.json`` (every cell).
The refund and email scenarios serve a notary on a fresh PostgreSQL database
(``EXPERIMENTS_DATABASE_URL``, see experiments/kit/live_notary.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.kit import cli
from experiments.scenarios import SCENARIOS

if __name__ == "__main__":
    cli.main(SCENARIOS, description=(__doc__ or "").splitlines()[0])
