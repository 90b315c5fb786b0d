"""Samples (rows of a batch) per request name, counted beside Locust's request statistics.

Locust's own statistics count requests and bytes (a request event's `response_length` is its
response payload in bytes); a Triton user's throughput is in samples. Each request event carries
its batch size in `context["batch_size"]`; this counter adds it up per name and per second, in
every process. Workers hand their counts to the master with each stats report (Locust's
`report_to_master` / `worker_report` events), as Locust does with its own statistics, so the
master holds the totals. No locust import here: the listeners take the events' keyword arguments.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

REPORT_KEY = "pytest_triton_samples"
ATTRIBUTE = "pytest_triton_samples"
KEEP_SECONDS = 30  # per-second counts older than this are dropped (the rate window is ~10 s)


class SampleCounter:
    """Successful samples per request name: a total and per-second counts."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.per_second: dict[str, dict[int, int]] = {}

    def add(self, name: str, samples: int, second: int) -> None:
        self.totals[name] = self.totals.get(name, 0) + samples
        seconds = self.per_second.setdefault(name, {})
        if second not in seconds:
            for old in [s for s in seconds if s < second - KEEP_SECONDS]:
                del seconds[old]
        seconds[second] = seconds.get(second, 0) + samples

    def total(self, name: str | None = None) -> int:
        return self.totals.get(name, 0) if name is not None else sum(self.totals.values())

    def current_rate(self, name: str, start_time: float | None,
                     last_request_timestamp: float | None) -> float:
        """Samples/s over the window Locust's `current_rps` uses (about the last 10 s, without
        the last two seconds that are still filling), so the two read side by side."""
        if last_request_timestamp is None:
            return 0.0
        last = int(last_request_timestamp)
        first = max(last - 12, int(start_time or 0))
        seconds = self.per_second.get(name, {})
        counts = [seconds.get(s, 0) for s in range(first, last - 2)]
        return sum(counts) / len(counts) if counts else 0.0

    def reset(self, **_: Any) -> None:
        self.totals.clear()
        self.per_second.clear()

    # -- Locust's listeners ----------------------------------------------------------------
    def on_request(self, name: str, exception: BaseException | None = None,
                   context: Mapping[str, Any] | None = None, **_: Any) -> None:
        if exception is not None or not context:
            return
        batch = context.get("batch_size")
        if batch:
            self.add(name, int(batch), int(time.time()))

    def on_report_to_master(self, data: dict[str, Any], **_: Any) -> None:
        """On a worker: send what was counted since the last report, and start over."""
        data[REPORT_KEY] = {"totals": dict(self.totals),
                            "per_second": {n: dict(s) for n, s in self.per_second.items()}}
        self.reset()

    def on_worker_report(self, data: Mapping[str, Any], **_: Any) -> None:
        """On the master: add a worker's counts."""
        report = data.get(REPORT_KEY)
        if not report:
            return
        for name, samples in report["totals"].items():
            self.totals[name] = self.totals.get(name, 0) + int(samples)
        for name, seconds in report["per_second"].items():
            mine = self.per_second.setdefault(name, {})
            for second, samples in seconds.items():
                mine[int(second)] = mine.get(int(second), 0) + int(samples)


def attach(environment: Any) -> SampleCounter:
    """One counter per environment, listening on its events (every process of a run)."""
    counter = counter_of(environment)
    if counter is None:
        counter = SampleCounter()
        setattr(environment, ATTRIBUTE, counter)
        events = environment.events
        events.request.add_listener(counter.on_request)
        events.report_to_master.add_listener(counter.on_report_to_master)
        events.worker_report.add_listener(counter.on_worker_report)
        events.reset_stats.add_listener(counter.reset)
        events.test_start.add_listener(counter.reset)  # Locust clears its statistics there too
    return counter


def counter_of(environment: Any) -> SampleCounter | None:
    return getattr(environment, ATTRIBUTE, None)
