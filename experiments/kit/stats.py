"""The one statistics module of the benchmarks, so every p50, p95 and p99 they print is computed
the same way and their columns can be set side by side.

Percentiles are nearest-rank: the p-th percentile of n samples is the ceil(p/100 * n)-th
smallest, always a value that was measured (the p99 of 500 samples is the 495th smallest, the p50
of 200 the 100th). The median is the p50 by that rule, not an average of the two middle values.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest rank: the ceil(q/100 * n)-th smallest of the n samples (q in 0..100)."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(len(ordered) * q / 100))
    return ordered[rank - 1]


def median(samples: Sequence[float]) -> float:
    """The p50 by the nearest-rank rule: a measured value, never the mean of the middle two."""
    return percentile(samples, 50)


def mean(samples: Sequence[float]) -> float:
    return statistics.fmean(samples) if samples else math.nan


@dataclass(frozen=True)
class Stats:
    """A sample's size, nearest-rank percentiles and mean."""

    samples: int
    p50: float
    p95: float
    p99: float
    mean: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        return cls(
            len(samples),
            percentile(samples, 50),
            percentile(samples, 95),
            percentile(samples, 99),
            mean(samples),
        )


def best_of(repeats: int, run: Callable[[], object]) -> float:
    """Seconds of the fastest of `repeats` runs: the least disturbed by the rest of the machine."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        timings.append(time.perf_counter() - started)
    return min(timings)


def duration(seconds: float) -> str:
    """Seconds as "12.34 ms", or "3.21 us" below 10 us; "n/a" for no figure (NaN)."""
    if math.isnan(seconds):
        return "n/a"
    if abs(seconds) < 1e-5:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.2f} ms"


def span(values: Sequence[int]) -> str:
    """The values as "3", or "3-5" when they differ; "" for none."""
    if not values:
        return ""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"
