"""Measurement windows and their stability, as perf_analyzer judges a measurement.

A run is cut into windows (by time, or by request count for slow models) after a warm-up
that is not measured. A measurement is accepted only when N consecutive windows agree within
X% on throughput and on the latency percentile (perf_analyzer: 3 windows, 10%); it is then
the merge of those windows: their requests' latency histograms added up, so its percentiles
are those of all its requests. window_log.py cuts a run into windows. No locust import here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from pytest_triton.load.measure.failed_requests import FailureTally
from pytest_triton.load.measure.latency_histogram import LatencyHistogram, ms_text
from pytest_triton.load.measure.targets import Rates
from pytest_triton.parity.compare import finite_or_none

PERCENTILES = (50, 90, 95, 99)
HISTOGRAM_KEY = "latency_histogram"
"""A window's histogram in its JSON: HdrHistogram's base64 text (latency_histogram.py)."""
REASONS_KEY = "failure_reasons"
"""A window's (and a point's) failed requests by reason in its JSON (failed_requests.py)."""


@dataclass(frozen=True)
class Window(Rates):
    """One measurement window; latencies in ms with microsecond resolution, from the histogram
    of its requests' latencies (None for a window read back from a report without one)."""

    index: int
    start_s: float  # since the end of the warm-up
    duration_s: float
    requests: int
    failures: int
    samples: int  # successful requests x their batch size
    avg_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    histogram: LatencyHistogram | None = field(default=None, compare=False, repr=False)
    reasons: FailureTally | None = field(default=None, compare=False, repr=False)

    def successful_samples(self) -> int:
        return self.samples

    def latency(self, percentile: int) -> float:
        return {50: self.p50_ms, 90: self.p90_ms, 95: self.p95_ms, 99: self.p99_ms}[percentile]

    def as_dict(self) -> dict[str, Any]:
        figures = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("histogram", "reasons")
        }
        if self.histogram is not None:
            figures[HISTOGRAM_KEY] = self.histogram.encode()
        figures[REASONS_KEY] = self.reasons.as_list() if self.reasons is not None else []
        return {**figures, "throughput": self.throughput, "request_rate": self.request_rate}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Window:
        """A window from as_dict() (its histogram too, where the report has it)."""
        known = {f.name for f in fields(cls)} - {"histogram", "reasons"}
        encoded = data.get(HISTOGRAM_KEY)
        reasons = data.get(REASONS_KEY)
        return cls(
            **{k: v for k, v in data.items() if k in known},
            histogram=LatencyHistogram.decode(encoded) if encoded else None,
            reasons=FailureTally.from_list(reasons) if reasons is not None else None,
        )


def merged_reasons(windows: Sequence[Window]) -> FailureTally | None:
    """The windows' failures by reason added up (None where no window has them)."""
    if all(w.reasons is None for w in windows):
        return None
    total = FailureTally()
    for w in windows:
        if w.reasons is not None:
            total.add(w.reasons)
    return total


def merge(windows: Sequence[Window], index: int = -1) -> Window:
    """Several windows as one. Where every window has its histogram (windows cut from a run),
    the merge's percentiles are those of the histograms added up: of all its requests. Else
    (windows read back from an older report) the requests-weighted mean of the windows', as
    perf_analyzer averages its stable windows."""
    if not windows:
        raise ValueError("nothing to merge")
    histograms = [w.histogram for w in windows]
    if all(h is not None for h in histograms):
        return _merge_histograms(windows, index)
    ok = [w.successes for w in windows]
    total_ok = sum(ok)

    def mean(values: Iterable[float]) -> float:
        pairs = [(v, n) for v, n in zip(values, ok, strict=True) if n and not math.isnan(v)]
        weight = sum(n for _, n in pairs)
        return sum(v * n for v, n in pairs) / weight if weight else math.nan

    return Window(
        index=index,
        start_s=windows[0].start_s,
        duration_s=sum(w.duration_s for w in windows),
        requests=sum(w.requests for w in windows),
        failures=sum(w.failures for w in windows),
        samples=sum(w.samples for w in windows),
        avg_ms=mean(w.avg_ms for w in windows) if total_ok else math.nan,
        p50_ms=mean(w.p50_ms for w in windows),
        p90_ms=mean(w.p90_ms for w in windows),
        p95_ms=mean(w.p95_ms for w in windows),
        p99_ms=mean(w.p99_ms for w in windows),
        reasons=merged_reasons(windows),
    )


def _merge_histograms(windows: Sequence[Window], index: int) -> Window:
    total = LatencyHistogram()
    latency_sum, timed = 0.0, 0
    for w in windows:
        assert w.histogram is not None
        total.add(w.histogram)
        if w.histogram.count and not math.isnan(w.avg_ms):  # NaN: a window nothing answered
            latency_sum += w.avg_ms * w.histogram.count
            timed += w.histogram.count
    pct = total.percentiles_ms(PERCENTILES)
    requests = sum(w.requests for w in windows)
    if requests and sum(w.failures for w in windows) >= requests:  # nothing answered
        pct, timed = dict.fromkeys(pct, math.nan), 0
    return Window(
        index=index,
        start_s=windows[0].start_s,
        duration_s=sum(w.duration_s for w in windows),
        requests=sum(w.requests for w in windows),
        failures=sum(w.failures for w in windows),
        samples=sum(w.samples for w in windows),
        avg_ms=latency_sum / timed if timed else math.nan,
        p50_ms=pct[50],
        p90_ms=pct[90],
        p95_ms=pct[95],
        p99_ms=pct[99],
        histogram=total,
        reasons=merged_reasons(windows),
    )


@dataclass(frozen=True)
class Criterion:
    """How many consecutive windows must agree, and within what share."""

    windows: int = 3
    tolerance_pct: float = 10.0
    percentile: int = 99

    def spread_pct(self, values: Sequence[float]) -> float:
        """The largest distance of a value from their mean, in percent of the mean."""
        if any(math.isnan(v) for v in values):
            return math.inf
        mean = sum(values) / len(values)
        if mean == 0:
            return 0.0 if all(v == 0 for v in values) else math.inf
        return 100 * max(abs(v - mean) for v in values) / mean


@dataclass(frozen=True)
class Stability:
    """The verdict on a series of windows; `measurement` is the merge of the agreeing ones
    (None when none agree: the caller reports its whole run instead)."""

    stable: bool
    criterion: Criterion
    windows: tuple[Window, ...]
    chosen: tuple[Window, ...]
    throughput_spread_pct: float
    latency_spread_pct: float
    reason: str

    @property
    def measurement(self) -> Window | None:
        return merge(self.chosen) if self.chosen else None

    @property
    def judged(self) -> Window | None:
        """What targets are judged on: the agreeing windows' merge; where none agree, all the
        windows' (the run after its warm-up, the partial windows at its ends left out)."""
        return self.measurement or (merge(self.windows) if self.windows else None)

    def summary(self) -> str:
        c = self.criterion
        if self.stable:
            first, last = self.chosen[0].index, self.chosen[-1].index
            return (
                f"stable: windows {first}-{last} agree within {c.tolerance_pct:g}% "
                f"(throughput {self.throughput_spread_pct:.1f}%, p{c.percentile} latency "
                f"{self.latency_spread_pct:.1f}%)"
            )
        return f"NOT STABLE: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        m = self.measurement
        return {
            "stable": self.stable,
            "windows_needed": self.criterion.windows,
            "tolerance_pct": self.criterion.tolerance_pct,
            "percentile": self.criterion.percentile,
            "chosen": [w.index for w in self.chosen],
            "throughput_spread_pct": finite_or_none(self.throughput_spread_pct),
            "latency_spread_pct": finite_or_none(self.latency_spread_pct),
            "reason": self.reason,
            "summary": self.summary(),
            "measurement": m.as_dict() if m else None,
        }


def assess(windows: Sequence[Window], criterion: Criterion) -> Stability:
    """The latest N consecutive windows that agree, as perf_analyzer takes the last N once they
    do; a window without a successful request never agrees."""
    windows = tuple(windows)
    n = criterion.windows
    if len(windows) < n:
        return Stability(
            False,
            criterion,
            windows,
            (),
            math.inf,
            math.inf,
            f"only {len(windows)} complete measurement window(s), {n} needed: run "
            "longer (-t) or shorten the windows (--triton-measurement-interval, in ms)",
        )
    best: tuple[float, float] = (math.inf, math.inf)
    for end in range(len(windows), n - 1, -1):
        group = windows[end - n : end]
        spreads = (
            criterion.spread_pct([w.throughput for w in group]),
            criterion.spread_pct([w.latency(criterion.percentile) for w in group]),
        )
        if all(w.successes for w in group) and max(spreads) <= criterion.tolerance_pct:
            return Stability(True, criterion, windows, group, *spreads, "")
        if end == len(windows):
            best = spreads
    return Stability(
        False,
        criterion,
        windows,
        (),
        *best,
        f"no {n} consecutive windows of {len(windows)} agree within "
        f"{criterion.tolerance_pct:g}% (last {n}: throughput {_pct(best[0])}, "
        f"p{criterion.percentile} latency {_pct(best[1])} apart)",
    )


def _pct(value: float) -> str:
    return f"{value:.1f}%" if math.isfinite(value) else "n/a"


def windows_table(
    windows: Sequence[Window], unit: str = "samples/s", chosen: Sequence[Window] = ()
) -> str:
    """Per-window figures, the agreeing windows marked with *."""
    marked = {w.index for w in chosen}
    lines = [
        f"{'window':>6}  {'start s':>7}  {'requests':>8}  {'failed':>6}  "
        f"{unit:>12}  {'avg ms':>8}  {'p50 ms':>8}  {'p95 ms':>8}  {'p99 ms':>8}"
    ]
    for w in windows:
        star = "*" if w.index in marked else " "
        lines.append(
            f"{w.index:>5}{star}  {w.start_s:>7.1f}  {w.requests:>8}  {w.failures:>6}  "
            f"{w.throughput:>12,.1f}  {ms_text(w.avg_ms):>8}  {ms_text(w.p50_ms):>8}  "
            f"{ms_text(w.p95_ms):>8}  {ms_text(w.p99_ms):>8}"
        )
    return "\n".join(lines)
