"""How far a metric measured on N samples can be from the model's true value: the Wilson
score interval for proportions (top-1, exact match, agreement), a percentile bootstrap for the
rest; and how many samples a ratio rule needs before it means anything."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pytest_triton.base.dtypes import Array

Z_95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval
BOOTSTRAP_ROUNDS = 400


def wilson(successes: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval of a proportion: unlike p +- z*sqrt(p(1-p)/n) it stays inside
    [0, 1] and is not zero-wide when every sample succeeded."""
    if n <= 0:
        raise ValueError("a proportion of no samples has no interval")
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap(
    statistic: Callable[[Array], float], n: int, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0
) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of `statistic(indices)` over samples drawn with
    replacement (a fixed seed: the same data gives the same interval). Draws where the
    statistic is undefined (ROC AUC of one class only) raise ValueError and are skipped."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(rounds):
        try:
            values.append(statistic(rng.integers(0, n, n)))
        except ValueError:
            continue
    if not values:
        return (math.nan, math.nan)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def samples_needed(reference: float, min_ratio: float) -> int:
    """The fewest samples a `served >= min_ratio x reference` rule can resolve: the allowed
    drop, (1 - min_ratio) x reference, must be at least one sample's weight 1/N. Below that a
    single answer more or less decides the verdict, so 50 samples cannot judge a 99% rule
    (it needs 100 at a reference of 1.0, 1,000 for MLPerf's 99.9%)."""
    drop = (1.0 - min_ratio) * reference
    if drop <= 0:
        return 0
    return math.ceil(1.0 / drop - 1e-9)
