"""A user's open loop: requests leave on schedule, each in its own greenlet, at most
`max_in_flight` outstanding; latency counts from the scheduled time (see arrivals.py). The
schedule is a constant rate, a traffic shape's changing rate, or a replayed trace's arrivals
(shapes.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.pool

from pytest_triton.base.config import Distribution, TritonConfig
from pytest_triton.load.measure.arrivals import Lag, schedule
from pytest_triton.load.measure.stages import Arrival, load_at, stages_of
from pytest_triton.load.runner import recording, shapes

SendDue = Callable[[float, int | None], None]
"""Sends one request that was due at the given perf_counter() time (of the given batch size,
or the user's), and reports it."""


def open_loop(
    environment: Any, config: TritonConfig, user_number: int
) -> OpenLoop | ReplayLoop | None:
    """The open loop of one user (its share of --triton-request-rate, of a shape's rate or of
    a replayed trace's arrivals), or None when closed."""
    users = users_in_run(environment)
    trace = shapes.trace_of(environment, config)
    if trace is not None:
        lag = recording.schedule_lag(environment, len(trace) / max(trace[-1].at_s, 1.0))
        assert lag is not None
        mine = trace[user_number % users :: users]
        return ReplayLoop(mine, config.load.max_in_flight, lag, shapes.shape_clock(environment))
    if not config.load.request_rate:
        return None
    rate = config.load.request_rate / users
    rate_at = None
    if config.load.shape != "none":
        stages, begun = stages_of(config), shapes.shape_clock(environment)

        def rate_at(due: float) -> float | None:
            total = load_at(stages, due - begun)
            return None if total is None else total / users

        rate = stages[0].load / users
    lag = recording.schedule_lag(environment, rate)
    assert lag is not None
    return OpenLoop(
        rate,
        config.load.request_distribution,
        config.load.max_in_flight,
        lag,
        seed=user_number,
        rate_at=rate_at,
    )


def users_in_run(environment: Any) -> int:
    """All users of the run, across workers: the rate is shared among them."""
    options = environment.parsed_options
    if options is not None and getattr(options, "num_users", None):
        return max(1, int(options.num_users))
    runner = environment.runner
    return max(1, int(getattr(runner, "target_user_count", 0) or 1))


class OpenLoop:
    """Runs until its user is stopped; stop() ends the requests still in flight."""

    def __init__(
        self,
        rate: float,
        distribution: Distribution,
        max_in_flight: int,
        lag: Lag,
        seed: int | None = None,
        rate_at: Callable[[float], float | None] | None = None,
    ) -> None:
        self.rate = rate
        self.distribution = distribution
        self.lag = lag
        self.seed = seed
        self.rate_at = rate_at
        self.pool = gevent.pool.Pool(max_in_flight)

    def run(self, send_due: SendDue) -> None:
        for due in schedule(
            self.rate,
            self.distribution,
            start=time.perf_counter(),
            seed=self.seed,
            rate_at=self.rate_at,
        ):
            delay = due - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            self.pool.wait_available()  # at the cap, this send leaves late
            self.lag.record(time.perf_counter() - due)
            self.pool.spawn(send_due, due, None)
        _idle()

    def stop(self) -> None:
        self.pool.kill(block=False)


class ReplayLoop:
    """A user's share of a recorded trace: each arrival leaves at its time (counted from the
    test start) with its batch size, whatever the server does; then the user idles until the
    shape ends the run."""

    def __init__(self, arrivals: list[Arrival], max_in_flight: int, lag: Lag, start: float):
        self.arrivals = arrivals
        self.lag = lag
        self.start = start
        self.pool = gevent.pool.Pool(max_in_flight)

    def batch_sizes(self) -> list[int]:
        return sorted({a.batch_size for a in self.arrivals})

    def run(self, send_due: SendDue) -> None:
        for arrival in self.arrivals:
            due = self.start + arrival.at_s
            delay = due - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            self.pool.wait_available()
            self.lag.record(time.perf_counter() - due)
            self.pool.spawn(send_due, due, arrival.batch_size)
        _idle()

    def stop(self) -> None:
        self.pool.kill(block=False)


def _idle() -> None:
    """The schedule is over: send nothing more until the user is stopped (Locust would call
    the task again, and a replay would start over)."""
    while True:
        gevent.sleep(3600)
