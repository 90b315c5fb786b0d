"""A user's open loop: requests leave on schedule, each in its own greenlet, at most
`max_in_flight` outstanding; latency counts from the scheduled time (see arrivals.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.pool

from pytest_triton.base.config import Distribution, TritonConfig
from pytest_triton.load.locust import recording
from pytest_triton.load.locust.arrivals import Lag, schedule

SendDue = Callable[[float], None]
"""Sends one request that was due at the given perf_counter() time, and reports it."""


def open_loop(environment: Any, config: TritonConfig, user_number: int) -> OpenLoop | None:
    """The open loop of one user (its share of --triton-request-rate), or None when closed."""
    if not config.load.request_rate:
        return None
    rate = config.load.request_rate / users_in_run(environment)
    lag = recording.schedule_lag(environment, rate)
    assert lag is not None
    return OpenLoop(
        rate,
        config.load.request_distribution,
        config.load.max_in_flight,
        lag,
        seed=user_number,
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
    ) -> None:
        self.rate = rate
        self.distribution = distribution
        self.lag = lag
        self.seed = seed
        self.pool = gevent.pool.Pool(max_in_flight)

    def run(self, send_due: SendDue) -> None:
        for due in schedule(
            self.rate, self.distribution, start=time.perf_counter(), seed=self.seed
        ):
            delay = due - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            self.pool.wait_available()  # at the cap, this send leaves late
            self.lag.record(time.perf_counter() - due)
            self.pool.spawn(send_due, due)

    def stop(self) -> None:
        self.pool.kill(block=False)
