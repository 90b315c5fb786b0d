"""Every request of a run, kept in short time slices by completion time and request name: the
run's measurement windows and its samples (rows of a batch) both come from here.

Locust's master has only aggregated statistics, which workers send every few seconds: windows
cut from those would be as ragged as the reports. Instead each process logs its own requests
in slices of the master's wall clock (workers measure their offset to it), and workers send
their new slices to the master with their reports. Windows are then
whole slices: by time (interval / slice of them), or by request count (slices until N
requests). Latencies are kept as a histogram rounded as Locust rounds them. No locust import.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_triton.base.config import MeasurementMode
from pytest_triton.load.measure.windows import PERCENTILES, Window, histogram_percentile

SLICE_S = 0.25
REPORT_KEY = "pytest_triton_requests"


def rounded_ms(latency_ms: float) -> int:
    """Two significant digits above 100 ms, as Locust's histograms keep them."""
    if latency_ms < 100:
        return round(latency_ms)
    if latency_ms < 1000:
        return int(round(latency_ms, -1))
    return int(round(latency_ms, -2))


@dataclass
class Slice:
    requests: int = 0
    failures: int = 0
    samples: int = 0
    latency_sum_ms: float = 0.0
    histogram: Counter[int] = field(default_factory=Counter)

    def add(self, other: Slice) -> None:
        self.requests += other.requests
        self.failures += other.failures
        self.samples += other.samples
        self.latency_sum_ms += other.latency_sum_ms
        self.histogram.update(other.histogram)

    def encode(self) -> list[Any]:
        return [
            self.requests,
            self.failures,
            self.samples,
            self.latency_sum_ms,
            [[k, v] for k, v in self.histogram.items()],
        ]

    @classmethod
    def decode(cls, data: list[Any]) -> Slice:
        requests, failures, samples, latency_sum, pairs = data
        return cls(
            int(requests),
            int(failures),
            int(samples),
            float(latency_sum),
            Counter({int(k): int(v) for k, v in pairs}),
        )


@dataclass
class WindowLog:
    """One process's (or, merged, a whole run's) requests by slice of completion time and
    request name: the run's measurement windows and its samples (rows of a batch) alike.
    Kept for the whole run (a few hundred kB an hour)."""

    slice_s: float = SLICE_S
    slices: dict[int, dict[str, Slice]] = field(default_factory=dict)
    cleared_at: float = 0.0  # wall clock of the last clear (test start, stats reset)
    # A worker logs on the master's clock (distributed.py), so that a clock off by seconds
    # does not move its requests into other windows.
    clock: Callable[[], float] = time.time
    _unsent: set[int] = field(default_factory=set)

    def record(self, at: float, name: str, latency_ms: float, ok: bool, samples: int) -> None:
        """One request completed at wall-clock time `at` (time.time())."""
        key = int(at // self.slice_s)
        by_name = self.slices.setdefault(key, {})
        entry = by_name.get(name)
        if entry is None:
            entry = by_name[name] = Slice()
        entry.requests += 1
        entry.latency_sum_ms += latency_ms
        entry.histogram[rounded_ms(latency_ms)] += 1
        if ok:
            entry.samples += samples
        else:
            entry.failures += 1
        self._unsent.add(key)

    def take_unsent(self) -> dict[str, Any]:
        """What changed since the last call (a worker's part of its report to the master);
        the worker forgets it, as Locust's workers reset their statistics once reported."""
        sent = {
            str(k): {n: e.encode() for n, e in self.slices.pop(k).items()}
            for k in sorted(self._unsent)
            if k in self.slices
        }
        self._unsent.clear()
        return {"slice_s": self.slice_s, "slices": sent}

    def merge(self, report: Mapping[str, Any]) -> None:
        if not math.isclose(float(report["slice_s"]), self.slice_s):
            raise ValueError("window logs of different slice lengths cannot be merged")
        for key, by_name in report["slices"].items():
            mine = self.slices.setdefault(int(key), {})
            for name, data in by_name.items():
                mine.setdefault(name, Slice()).add(Slice.decode(data))

    def clear(self, at: float | None = None) -> None:
        self.slices.clear()
        self._unsent.clear()
        self.cleared_at = time.time() if at is None else at

    @property
    def first_at(self) -> float | None:
        """Wall clock of the slice of the first request recorded (None before any): the load
        begins there, not at Locust's test start (workers forked and spawned under a busy
        machine may send their first request seconds later)."""
        return min(self.slices) * self.slice_s if self.slices else None

    def requests_outside(self, first: float, last: float) -> int:
        """Requests logged in slices before `first` or after `last` (wall clock): none in a
        run whose workers' clocks agree with the master's."""
        return sum(
            e.requests
            for k, by_name in self.slices.items()
            if (k + 1) * self.slice_s <= first or k * self.slice_s >= last
            for e in by_name.values()
        )

    # -- samples ---------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted({n for by_name in self.slices.values() for n in by_name})

    def samples(self, name: str | None = None) -> int:
        """Successful samples of the run (of one request name)."""
        return sum(
            e.samples
            for by_name in self.slices.values()
            for n, e in by_name.items()
            if name is None or n == name
        )

    def sample_rate(self, name: str | None, first: float, last: float) -> float:
        """Samples per second completed between two wall-clock times."""
        if last <= first:
            return 0.0
        keys = range(math.ceil(first / self.slice_s), math.floor(last / self.slice_s))
        total = sum(
            e.samples
            for k in keys
            for n, e in self.slices.get(k, {}).items()
            if name is None or n == name
        )
        return total / (len(keys) * self.slice_s) if len(keys) else 0.0

    def current_rate(
        self, name: str | None, start_time: float | None, last_request_timestamp: float | None
    ) -> float:
        """Samples/s over the window Locust's `current_rps` uses (the seconds [last-12, last-2),
        without the last two that are still filling), so the two read side by side."""
        if last_request_timestamp is None:
            return 0.0
        last = int(last_request_timestamp)
        return self.sample_rate(name, max(last - 12, int(start_time or 0)), last - 2)

    def share_within(self, first: float, last: float, limit_ms: float) -> float:
        """The share of requests completed between two wall-clock times (whole slices) that
        succeeded within `limit_ms`: goodput's share of an SLO. Latencies are the histogram's
        rounded ones, as the percentiles are. NaN when no request completed."""
        keys = range(math.floor(first / self.slice_s), math.ceil(last / self.slice_s))
        total = within = 0
        for k in keys:
            for entry in self.slices.get(k, {}).values():
                total += entry.requests
                fast = sum(n for ms, n in entry.histogram.items() if ms <= limit_ms)
                within += max(0, fast - entry.failures)  # a failure is never within the SLO
        return within / total if total else math.nan

    # -- Locust's listeners (wired by recording.py) ------------------------------------------
    def on_request(
        self,
        name: str,
        response_time: float,
        exception: BaseException | None = None,
        context: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> None:
        """Requests of other users (no batch size in their context) count no samples."""
        samples = int((context or {}).get("batch_size") or 0)
        self.record(self.clock(), name, float(response_time), exception is None, samples)

    def on_report_to_master(self, data: dict[str, Any], **_: Any) -> None:
        data[REPORT_KEY] = self.take_unsent()

    def on_worker_report(self, data: Mapping[str, Any], **_: Any) -> None:
        report = data.get(REPORT_KEY)
        if report:
            self.merge(report)

    # -- windows ---------------------------------------------------------------------------
    def windows(
        self,
        start: float,
        end: float,
        *,
        warmup_s: float,
        interval_s: float,
        mode: MeasurementMode = "time_windows",
        request_count: int = 50,
        name: str | None = None,
    ) -> list[Window]:
        """Complete windows between `start` + warm-up and `end` (wall clock): slices cut by the
        warm-up or the end are not measured. Every request name together, or one."""
        first = math.ceil((start + warmup_s) / self.slice_s - 1e-9)
        last = math.floor(end / self.slice_s + 1e-9)  # slices [first, last) are complete
        origin = first * self.slice_s
        if mode == "time_windows":
            per = max(1, round(interval_s / self.slice_s))
            groups: Iterator[range] = (range(k, k + per) for k in range(first, last - per + 1, per))
        else:
            groups = self._by_count(first, last, request_count, name)
        return [self._window(i, group, origin, name) for i, group in enumerate(groups, start=1)]

    def _slice(self, key: int, name: str | None) -> Slice:
        total = Slice()
        for n, entry in self.slices.get(key, {}).items():
            if name is None or n == name:
                total.add(entry)
        return total

    def _by_count(self, first: int, last: int, count: int, name: str | None) -> Iterator[range]:
        begin, seen = first, 0
        for key in range(first, last):
            seen += self._slice(key, name).requests
            if seen >= count:
                yield range(begin, key + 1)
                begin, seen = key + 1, 0

    def _window(self, index: int, keys: range, origin: float, name: str | None) -> Window:
        total = Slice()
        for key in keys:
            total.add(self._slice(key, name))
        answered = sum(total.histogram.values())
        pct = {p: histogram_percentile(total.histogram, p) for p in PERCENTILES}
        return Window(
            index=index,
            start_s=keys.start * self.slice_s - origin,
            duration_s=len(keys) * self.slice_s,
            requests=total.requests,
            failures=total.failures,
            samples=total.samples,
            avg_ms=total.latency_sum_ms / answered if answered else math.nan,
            p50_ms=pct[50],
            p90_ms=pct[90],
            p95_ms=pct[95],
            p99_ms=pct[99],
        )
