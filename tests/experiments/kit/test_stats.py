"""The benchmarks' and experiments' one percentile rule: nearest rank, a measured value."""

from __future__ import annotations

import math

from experiments.kit.stats import Stats, median, percentile


def test_a_percentile_is_the_nearest_ranked_sample() -> None:
    samples = [float(n) for n in range(500, 0, -1)]  # unsorted on purpose
    assert percentile(samples, 99) == 495.0  # the ceil(0.99 * 500) = 495th smallest
    assert percentile(samples, 50) == 250.0
    assert percentile(samples, 100) == 500.0
    assert percentile(samples, 0) == 1.0  # rank at least 1
    assert math.isnan(percentile([], 50))


def test_the_median_is_a_measured_value_not_the_mean_of_the_middle_two() -> None:
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.0  # statistics.median would say 2.5
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert Stats.of([4.0, 1.0, 3.0, 2.0]).p50 == median([4.0, 1.0, 3.0, 2.0])
