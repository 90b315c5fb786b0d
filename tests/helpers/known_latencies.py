"""Latencies whose percentiles are known, and how exact a percentile read from our histogram
must be: shared by the unit tests of the window log and the runs of
locustfiles/known_latency.py (this module imports no locust)."""

from __future__ import annotations

from pytest_triton.load.measure.latency_histogram import LatencyHistogram

PER_USER = 1000


def latencies_us(base_us: int, step_us: int = 1) -> list[int]:
    """What one user of locustfiles/known_latency.py reports, in order."""
    return [base_us + i * step_us for i in range(PER_USER)]


def exact_percentile(latencies_ms: list[float], percent: float) -> float:
    """The latency at HdrHistogram's rank for the percent (round half up, at least 1), read
    from the sorted latencies themselves."""
    ordered = sorted(latencies_ms)
    rank = max(int(percent * len(ordered) / 100 + 0.5), 1)
    return ordered[rank - 1]


def assert_within_precision(measured_ms: float, exact_ms: float) -> None:
    """A percentile read from the histogram is the top of the bucket holding the exact one:
    never below it, above it by at most its bucket (0.1%) plus the microsecond rounding."""
    low, high = LatencyHistogram().equivalent_range_ms(exact_ms)
    assert low <= measured_ms <= high, (measured_ms, exact_ms, (low, high))
    assert measured_ms - exact_ms <= exact_ms / 1000 + 0.0005
