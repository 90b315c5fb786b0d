"""Open-loop arrivals: when each request is due, and how far the generator fell behind.

In a closed loop a new request leaves only when the last one returned, so a server stall
stops the load and is counted once ("coordinated omission"). In an open loop requests leave
on a schedule whatever happens, and each latency counts from its scheduled time, so a stall
shows in every request that should have been sent meanwhile (wrk2; perf_analyzer's
request-rate mode). No locust import here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pytest_triton.base.config import Distribution

DISTRIBUTIONS: tuple[Distribution, ...] = ("constant", "poisson")
LATE_MS = 2.0
"""A send more than this (or one gap, when gaps are longer) after its scheduled time is late."""
BEHIND_SHARE = 0.01
"""More than this share of late sends means the generator fell behind its schedule."""
ACHIEVED_SHARE = 0.95
"""An achieved rate below this share of the asked one means the same."""


def schedule(
    rate: float,
    distribution: Distribution = "constant",
    *,
    start: float = 0.0,
    seed: int | None = None,
    rate_at: Callable[[float], float | None] | None = None,
) -> Iterator[float]:
    """Due times (same clock as `start`) of requests at `rate` per second: evenly spaced, or
    with exponential gaps (Poisson arrivals) of the same mean. `rate_at(due)` (same clock),
    when given, is the rate from each due time on (a traffic shape); None ends the schedule."""
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"a request rate must be a number > 0, got {rate!r}")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"request distribution must be constant or poisson, got {distribution!r}")
    rng = random.Random(seed)
    due = start
    while True:
        yield due
        now = rate if rate_at is None else rate_at(due)
        if now is None:
            return
        due += 1.0 / now if distribution == "constant" else rng.expovariate(now)


@dataclass
class Lag:
    """How late sends left against their schedule (one per generator process)."""

    rate: float
    sent: int = 0
    late: int = 0
    worst_ms: float = 0.0
    lags_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def late_after_ms(self) -> float:
        return max(LATE_MS, 1e3 / self.rate)

    def record(self, lag_s: float) -> None:
        lag_ms = max(lag_s, 0.0) * 1e3
        self.sent += 1
        self.worst_ms = max(self.worst_ms, lag_ms)
        if lag_ms > self.late_after_ms:
            self.late += 1
        if len(self.lags_ms) < 100_000:
            self.lags_ms.append(lag_ms)

    @property
    def behind(self) -> bool:
        return self.sent > 0 and self.late / self.sent > BEHIND_SHARE

    def summary(self) -> str:
        if not self.sent:
            return "no request was sent"
        share = 100 * self.late / self.sent
        return (
            f"{self.late} of {self.sent} sends ({share:.1f}%) left more than "
            f"{self.late_after_ms:.1f} ms after their scheduled time (worst "
            f"{self.worst_ms:.1f} ms)"
        )


def rate_warning(asked: float, achieved: float, lag: Lag | None = None) -> str | None:
    """Why the open loop did not hold its schedule, or None when it did."""
    reasons = []
    if achieved < ACHIEVED_SHARE * asked:
        reasons.append(f"achieved {achieved:,.1f} req/s of the {asked:,.1f} req/s asked")
    if lag is not None and lag.behind:
        reasons.append(lag.summary())
    if not reasons:
        return None
    return (
        "WARNING: the load generator fell behind its schedule ("
        + "; ".join(reasons)
        + "): latencies still count from the scheduled times, but the server saw less "
        "load than asked; raise --triton-max-in-flight, add users or workers (--processes), "
        "or lower the rate"
    )
