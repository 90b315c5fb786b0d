"""Every request of a run, kept in short time slices by completion time and request name: the
run's measurement windows and its samples (rows of a batch) both come from here.

Locust's master has only aggregated statistics, which workers send every few seconds: windows
cut from those would be as ragged as the reports. Instead each process logs its own requests
in slices of the master's wall clock (workers measure their offset to it), and workers send
their new slices to the master with their reports. Windows are then
whole slices: by time (interval / slice of them), or by request count (slices until N
requests). Latencies are kept in microseconds in an HdrHistogram per slice and request name
(latency_histogram.py), which travels as HdrHistogram's base64 text; past slices are kept
compact (a few hundred bytes each: a few MB per request name for an hour's run), and the
run's totals per request name are kept as it goes (the live view and the verdict read them).
No locust import.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pytest_triton.base.config import MeasurementMode
from pytest_triton.load.measure.failed_requests import FailureReason, FailureTally, failed
from pytest_triton.load.measure.latency_histogram import Counts, LatencyHistogram, counts_us, to_us
from pytest_triton.load.measure.windows import PERCENTILES, Window

SLICE_S = 0.25
REPORT_KEY = "pytest_triton_requests"
LIVE_SLICES = 20
"""Slices this far (5 s) behind the newest keep their recording histograms; older ones are
compacted (a late worker report decodes one again)."""


@dataclass
class Slice:
    """Requests of one slice (or of several added up): counts, latency sum and histogram."""

    requests: int = 0
    failures: int = 0
    samples: int = 0
    latency_sum_ms: float = 0.0
    histogram: LatencyHistogram = field(default_factory=LatencyHistogram)
    reasons: FailureTally = field(default_factory=FailureTally)  # the failures, by reason

    def record(
        self,
        latency_ms: float,
        latency_us: int,
        ok: bool,
        samples: int,
        failure: tuple[FailureReason, str] | None = None,
    ) -> None:
        """One request (its latency in ms, and in whole us as `to_us` makes it); a failed
        one counted under its reason and example (`failed(error)`)."""
        self.requests += 1
        self.latency_sum_ms += latency_ms
        self.histogram.record_us(latency_us)
        if ok:
            self.samples += samples
        else:
            self.failures += 1
            if failure is not None:
                self.reasons.record_reason(*failure)

    def record_many(
        self, latencies_ms: npt.NDArray[np.float64], latencies_us: Counts, samples: int
    ) -> None:
        """Successful requests at once, `samples` rows each (what record() counts of each);
        `latencies_us`: their whole microseconds, counted (counts_us)."""
        self.requests += len(latencies_ms)
        self.latency_sum_ms += float(latencies_ms.sum())
        self.histogram.record_counts_us(*latencies_us)
        self.samples += samples * len(latencies_ms)

    def add(self, other: Slice) -> None:
        self.requests += other.requests
        self.failures += other.failures
        self.samples += other.samples
        self.latency_sum_ms += other.latency_sum_ms
        self.histogram.add(other.histogram)
        if other.reasons:
            self.reasons.add(other.reasons)

    @property
    def avg_ms(self) -> float:
        answered = self.histogram.count
        return self.latency_sum_ms / answered if answered else math.nan

    def encode(self) -> list[Any]:
        """msgpack- and JSON-able: counts, latency sum, the histogram's base64 text, the
        failures by reason."""
        return [
            self.requests,
            self.failures,
            self.samples,
            self.latency_sum_ms,
            self.histogram.encode(),
            self.reasons.encode(),
        ]

    @classmethod
    def decode(cls, data: list[Any]) -> Slice:
        requests, failures, samples, latency_sum, histogram, *reasons = data
        return cls(
            int(requests),
            int(failures),
            int(samples),
            float(latency_sum),
            LatencyHistogram.decode(histogram, int(requests)),  # each request has a latency
            FailureTally.decode(reasons[0]) if reasons else FailureTally(),
        )


def runs(keys: npt.NDArray[np.int64]) -> Iterator[tuple[int, int]]:
    """(start, stop) of each run of equal keys in `keys` (sorted ones: a slice's, a second's)."""
    cuts = [0, *(np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist(), len(keys)]
    return itertools.pairwise(cuts)


@dataclass
class WindowLog:
    """One process's (or, merged, a whole run's) requests by slice of completion time and
    request name: the run's measurement windows and its samples (rows of a batch) alike.
    Kept for the whole run (past slices compact: about 1 kB per slice and request name,
    some 15 MB per request name for an hour)."""

    slice_s: float = SLICE_S
    slices: dict[int, dict[str, Slice]] = field(default_factory=dict)
    cleared_at: float = 0.0  # wall clock of the last clear (test start, stats reset)
    totals: dict[str, Slice] = field(default_factory=dict)  # the run so far, by name
    # A worker logs on the master's clock (distributed.py), so that a clock off by seconds
    # does not move its requests into other windows.
    clock: Callable[[], float] = time.time
    _unsent: set[int] = field(default_factory=set)
    _live: set[int] = field(default_factory=set)  # slices whose histograms record
    _newest: int = 0
    _touched: set[int] = field(default_factory=set)  # changed since windows were cut
    _cut: dict[tuple[int, int, str | None], tuple[Slice, dict[float, float]]] = field(
        default_factory=dict
    )
    # The slice and total the last request went to, while nothing else has changed them
    # (a request costs a few dict and set operations less; see record()).
    _hot: tuple[int, str, Slice, Slice] | None = None

    def record(
        self,
        at: float,
        name: str,
        latency_ms: float,
        ok: bool,
        samples: int,
        error: BaseException | None = None,
    ) -> None:
        """One request completed at wall-clock time `at` (time.time()); a failed one's
        `error` says why."""
        key = int(at // self.slice_s)
        hot = self._hot
        if hot is not None and hot[0] == key and hot[1] == name:
            entry, total = hot[2], hot[3]
        else:
            entry, total = self._entries(key, name)
        us = to_us(latency_ms)
        failure = failed(error) if error is not None and not ok else None
        entry.record(latency_ms, us, ok, samples, failure)
        total.record(latency_ms, us, ok, samples, failure)

    def record_many(
        self,
        name: str,
        at: npt.NDArray[np.float64],
        latencies_ms: npt.NDArray[np.float64],
        samples: int,
    ) -> None:
        """Successful requests of `name` at once, completed at `at` (time.time(), in order)
        after `latencies_ms`: the same counts as record() one at a time."""
        keys = np.floor_divide(at, self.slice_s).astype(np.int64)
        for start, stop in runs(keys):
            part = latencies_ms[start:stop]
            counted = counts_us(part)
            entry, total = self._entries(int(keys[start]), name)
            entry.record_many(part, counted, samples)
            total.record_many(part, counted, samples)

    def _entries(self, key: int, name: str) -> tuple[Slice, Slice]:
        """The slice and total a request of `name` in slice `key` goes to, marked unsent and
        touched; kept as the hot pair until a report, a merge, a clear or a cut of windows."""
        by_name = self.slices.setdefault(key, {})
        entry = by_name.get(name)
        if entry is None:
            entry = by_name[name] = Slice()
        total = self.totals.get(name)
        if total is None:
            total = self.totals[name] = Slice()
        self._unsent.add(key)
        self._touched.add(key)
        if key not in self._live:
            self._live.add(key)
            self._compact(key)
        self._hot = (key, name, entry, total)
        return entry, total

    def _compact(self, key: int) -> None:
        """Compact the histograms of slices well behind `key` (the newest seen)."""
        if key <= self._newest:
            return
        self._newest = key
        for old in [k for k in self._live if k < key - LIVE_SLICES]:
            self._live.discard(old)
            for entry in self.slices.get(old, {}).values():
                entry.histogram.compact()

    def take_unsent(self) -> dict[str, Any]:
        """What changed since the last call (a worker's part of its report to the master);
        the worker forgets it, as Locust's workers reset their statistics once reported."""
        self._hot = None
        sent = {
            str(k): {n: e.encode() for n, e in self.slices.pop(k).items()}
            for k in sorted(self._unsent)
            if k in self.slices
        }
        self._live -= self._unsent
        self._unsent.clear()
        self.totals.clear()  # everything recorded was unsent until now
        return {"slice_s": self.slice_s, "slices": sent}

    def merge(self, report: Mapping[str, Any]) -> None:
        if not math.isclose(float(report["slice_s"]), self.slice_s):
            raise ValueError("window logs of different slice lengths cannot be merged")
        self._hot = None
        keys = []
        for key, by_name in report["slices"].items():
            k = int(key)
            keys.append(k)
            mine = self.slices.setdefault(k, {})
            for name, data in by_name.items():
                theirs = Slice.decode(data)
                mine.setdefault(name, Slice()).add(theirs)
                self.totals.setdefault(name, Slice()).add(theirs)
            self._touched.add(k)
            self._live.add(k)
        if keys:
            self._compact(max(keys))

    def clear(self, at: float | None = None) -> None:
        self._hot = None
        self.slices.clear()
        self.totals.clear()
        self._unsent.clear()
        self._live.clear()
        self._touched.clear()
        self._cut.clear()
        self._newest = 0
        self.cleared_at = time.time() if at is None else at

    def total(self, name: str | None = None) -> Slice:
        """The run so far (of one request name): counts, latency sum and histogram."""
        total = Slice()
        for n, entry in self.totals.items():
            if name is None or n == name:
                total.add(entry)
        return total

    def recent(self, name: str | None, since: float, until: float | None = None) -> Slice:
        """Requests completed in the slices from wall-clock `since` on (until `until`)."""
        first = math.floor(since / self.slice_s)
        last = math.inf if until is None else until / self.slice_s
        total = Slice()
        for key in sorted(k for k in self.slices if first <= k < last):
            for n, entry in self.slices[key].items():
                if name is None or n == name:
                    total.add(entry)
        return total

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

    def settled_after(
        self,
        start: float,
        end: float,
        *,
        minimum_s: float,
        latest_s: float,
        tolerance_pct: float,
        step_s: float = 1.0,
    ) -> float | None:
        """Seconds after `start` (from `minimum_s` to `latest_s`, in whole steps) at which the
        load has warmed up: the first step whose request rate is within `tolerance_pct` of
        the next two steps' rate, as perf_analyzer measures until windows agree. None when it
        does not settle in time (JIT-compiling backends speed up for seconds under load)."""
        # Whole slices, as windows() cuts them: from a start off the slices' grid, times
        # would take a partial slice at both ends of each step (5 slices against 4.5, 11%
        # apart at a steady rate: never within 10%).
        per = self._slices_of(step_s)
        at = minimum_s
        while at <= latest_s + 1e-9:
            keys = self._whole_slices(start + at, end)
            if len(keys) < 3 * per:
                break
            first = keys.start
            now = self._requests(range(first, first + per))
            then = self._requests(range(first + per, first + 3 * per)) / 2
            if now and then and 100 * abs(now - then) <= tolerance_pct * then:
                return at
            at += step_s
        return None

    def _whole_slices(self, since: float, until: float) -> range:
        """The keys of the slices wholly between two wall-clock times."""
        return range(
            math.ceil(since / self.slice_s - 1e-9), math.floor(until / self.slice_s + 1e-9)
        )

    def _slices_of(self, seconds: float) -> int:
        """How many slices make `seconds` (at least one)."""
        return max(1, round(seconds / self.slice_s))

    def _requests(self, keys: range, name: str | None = None) -> int:
        """Requests completed in the slices `keys` (of every name, or of one)."""
        return sum(
            e.requests
            for k in keys
            for n, e in self.slices.get(k, {}).items()
            if name is None or n == name
        )

    # -- samples ---------------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted({n for by_name in self.slices.values() for n in by_name})

    def samples(self, name: str | None = None) -> int:
        """Successful samples of the run (of one request name)."""
        return sum(e.samples for n, e in self.totals.items() if name is None or n == name)

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
        self.record(self.clock(), name, float(response_time), exception is None, samples, exception)

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
        complete = self._whole_slices(start + warmup_s, end)
        first, last = complete.start, complete.stop
        origin = first * self.slice_s
        if self._touched:  # windows cut before over slices that changed since are stale
            self._cut = {
                k: v
                for k, v in self._cut.items()
                if not any(k[0] <= t < k[1] for t in self._touched)
            }
            self._touched.clear()
            self._hot = None  # the next request marks its slice touched again
        if mode == "time_windows":
            per = self._slices_of(interval_s)
            groups: Iterator[range] = (range(k, k + per) for k in range(first, last - per + 1, per))
        else:
            groups = self._by_count(first, last, request_count, name)
        return [self._window(i, group, origin, name) for i, group in enumerate(groups, start=1)]

    def _by_count(self, first: int, last: int, count: int, name: str | None) -> Iterator[range]:
        begin, seen = first, 0
        for key in range(first, last):
            seen += self._requests(range(key, key + 1), name)
            if seen >= count:
                yield range(begin, key + 1)
                begin, seen = key + 1, 0

    def _total(self, keys: range, name: str | None) -> tuple[Slice, dict[float, float]]:
        """The slices' requests added up and their percentiles (kept: a generator cuts the
        same windows again and again while it waits for them to agree)."""
        cut = (keys.start, keys.stop, name)
        found = self._cut.get(cut)
        if found is None:
            total = Slice()
            for key in keys:
                for n, entry in self.slices.get(key, {}).items():
                    if name is None or n == name:
                        total.add(entry)
            pct = total.histogram.percentiles_ms(PERCENTILES)
            total.histogram.compact()  # an hour of windows kept live would be 100+ MB
            if len(self._cut) > 4096:
                self._cut.clear()
            found = self._cut[cut] = (total, pct)
        return found

    def _window(self, index: int, keys: range, origin: float, name: str | None) -> Window:
        total, pct = self._total(keys, name)
        if total.requests and total.failures >= total.requests:  # nothing answered: a
            pct = dict.fromkeys(pct, math.nan)  # failure's latency is no answer's
        return Window(
            index=index,
            start_s=keys.start * self.slice_s - origin,
            duration_s=len(keys) * self.slice_s,
            requests=total.requests,
            failures=total.failures,
            samples=total.samples,
            avg_ms=math.nan if math.isnan(pct[50]) else total.avg_ms,
            p50_ms=pct[50],
            p90_ms=pct[90],
            p95_ms=pct[95],
            p99_ms=pct[99],
            histogram=total.histogram,
            reasons=FailureTally(dict(total.reasons.counts), dict(total.reasons.examples)),
        )
