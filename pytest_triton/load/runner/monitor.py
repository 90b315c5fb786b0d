"""Watching a run from the inside: the load generator's CPU and the request bound."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent
import psutil
from locust.runners import MasterRunner

from pytest_triton.load.runner.generator_cpu import cpu_of

MONITOR_PERIOD_S = 0.25


class RunMonitor:
    """A greenlet that samples the workers' CPU (on a master) and ends the run once
    --triton-max-requests requests were sent or the server died (`server_death` says how);
    plus this process's own CPU over the run."""

    def __init__(
        self,
        environment: Any,
        max_requests: int | None,
        end_run: Callable[[str], None],
        server_death: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.environment = environment
        self.max_requests = max_requests
        self.end_run = end_run
        self.server_death = server_death
        self.worker_samples: list[float] = []
        self.cpu_warning = False
        self._greenlet: gevent.Greenlet | None = None
        times = psutil.Process().cpu_times()
        self._cpu_start = (times.user + times.system, time.monotonic())

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._watch)

    def _watch(self) -> None:
        runner = self.environment.runner
        while True:
            gevent.sleep(MONITOR_PERIOD_S)
            if isinstance(runner, MasterRunner):
                cpu = cpu_of(self.environment)
                reported = cpu.busiest_worker() if cpu is not None else None
                usage = [w.cpu_usage for w in runner.clients.values()]  # Locust's, every 10 s
                if reported is not None or usage:
                    self.worker_samples.append(reported if reported is not None else max(usage))
            reason = None
            if self.max_requests and self.environment.stats.total.num_requests >= self.max_requests:
                reason = f"--triton-max-requests {self.max_requests} reached"
            death = self.server_death()
            if death:  # every request fails at once from now on: nothing left to measure
                reason = f"the server died: {death}"
            if reason:
                # Not from this greenlet: stopping the run kills it.
                gevent.spawn(self.end_run, reason)
                return

    def stop(self) -> float | None:
        """Stop watching; the generator's CPU over the run in percent of one core (a master
        reports its busiest worker's)."""
        if self._greenlet is not None and self._greenlet is not gevent.getcurrent():
            self._greenlet.kill(block=False)
        self._greenlet = None
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            self.cpu_warning = self.cpu_warning or runner.worker_cpu_warning_emitted
            samples = self.worker_samples
            return float(sum(samples)) / len(samples) if samples else None
        times = psutil.Process().cpu_times()
        cpu, wall = times.user + times.system, time.monotonic()
        if wall <= self._cpu_start[1]:
            return None
        return float(100 * (cpu - self._cpu_start[0]) / (wall - self._cpu_start[1]))
