"""How far a metric measured on N samples can be from the model's true value: scipy's Wilson
score interval for proportions (top-1, exact match, agreement), scipy's percentile bootstrap
for the rest; and how many samples a ratio rule needs before it means anything.

The interval is reported beside the verdict, never part of it: the rule compares the served
value itself with the threshold (AccuracyResult.ok)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import DegenerateDataWarning, binomtest
from scipy.stats import bootstrap as scipy_bootstrap

from pytest_triton.base.dtypes import Array

CONFIDENCE = 0.95
BOOTSTRAP_ROUNDS = 400


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson's score interval of a proportion (scipy's binomtest): unlike p +- z*sqrt(p(1-p)/n)
    it stays inside [0, 1] and is not zero-wide when every sample succeeded."""
    if n <= 0:
        raise ValueError("a proportion of no samples has no interval")
    ci = binomtest(successes, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


def bootstrap(
    statistic: Callable[[Array], float],
    strata: Sequence[Array],
    rounds: int = BOOTSTRAP_ROUNDS,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap (scipy's) of `statistic(indices)`: each round draws, with
    replacement, as many indices from each stratum as it holds (one stratum: the whole set;
    one per class: a metric such as ROC AUC stays defined on every draw). A fixed seed: the
    same data gives the same interval. What the statistic raises reaches the caller; a value
    that is not finite is refused, naming how many draws gave one."""

    kept = [np.asarray(s) for s in strata if len(s) == 1]  # one sample: on every draw as is
    drawn_from = tuple(np.asarray(s) for s in strata if len(s) > 1)
    if not drawn_from:
        raise ValueError("a bootstrap needs a stratum of two samples or more")

    def on_draw(*drawn: Array) -> float:
        return float(statistic(np.concatenate([*drawn, *kept])))

    with warnings.catch_warnings():  # said below, with the count of draws
        warnings.simplefilter("ignore", DegenerateDataWarning)
        found = scipy_bootstrap(
            drawn_from,
            on_draw,
            n_resamples=rounds,
            confidence_level=CONFIDENCE,
            method="percentile",
            vectorized=False,
            paired=False,
            rng=np.random.default_rng(seed),
        )
    undefined = int((~np.isfinite(found.bootstrap_distribution)).sum())
    if undefined:
        raise ValueError(
            f"the statistic was not a finite number on {undefined} of {rounds} bootstrap draws "
            "(samples drawn with replacement from the dataset): make it defined on any such "
            "draw"
        )
    low, high = found.confidence_interval
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
