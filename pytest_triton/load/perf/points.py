"""Perf sweep results: points, load ranges and the latency-bounded search (the reports are
in report.py). No locust import here."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_triton.load.measure.failed_requests import FailureTally, tally_of
from pytest_triton.load.measure.latency_histogram import ms_text
from pytest_triton.load.measure.targets import Rates


@dataclass(frozen=True)
class Point(Rates):
    """One measured (batch size, concurrency) point; latencies in ms (with microsecond
    resolution, from the merged histogram of its measured windows), server times in us."""

    batch_size: int
    concurrency: int
    duration_s: float
    requests: int
    failures: int
    avg_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    server_queue_us: float = 0.0
    server_compute_input_us: float = 0.0
    server_compute_infer_us: float = 0.0
    server_compute_output_us: float = 0.0
    server_overhead_us: float = 0.0
    server_request_us: float = 0.0
    server_avg_batch: float = 0.0
    server_requests: int = 0  # successful requests the server counted (over its replicas)
    # with --triton-replicas: each replica's success and execution counts, by its URL
    server_replicas: dict[str, dict[str, int]] = field(default_factory=dict, compare=False)
    generator_cpu_percent: float | None = None
    request_rate_asked: float | None = None  # open loop; None: closed loop at `concurrency`
    stable: bool = True
    stability: str = ""
    windows: list[dict[str, Any]] = field(default_factory=list, compare=False)
    schedule_warning: str | None = None
    latency_histogram: str = field(default="", compare=False, repr=False)  # base64 HdrHistogram
    goodput: float | None = None  # share of requests successful within the SLO, when one is set
    server_executions: int = 0
    server_batches: dict[str, int] = field(default_factory=dict, compare=False)  # size -> execs
    # what a kind of model adds (kinds.py): "single", "sequence" (a stateful model driven in
    # sequences) or "stream" (a decoupled one, its latencies above are each stream's end to end)
    kind: str = "single"
    answers_checked: int | None = None  # over the point's whole load, warm-up included
    wrong_answers: int = 0  # likewise
    first_wrong_answer: str | None = None
    # --min-agreement: the share of compared samples whose top-1 class is the fp32 reference's
    answer_agreement: float | None = None  # over the point's whole load, warm-up included
    agreement_samples: int = 0
    sequences: int | None = None  # sequences whose END was answered in the measured windows
    mean_sequence_length: float | None = None
    ttft_p50_ms: float | None = None  # streams that ended in the measured windows
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    output_tokens_per_s: float | None = None
    streams_per_s: float | None = None
    streams: int | None = None  # complete ones (their final flag), in the measured windows
    failed_streams: int | None = None  # likewise, failed (an error, no final flag, wrong)
    output_tokens: int | None = None
    stream_goodput: float | None = None  # with --perf-slo-ttft-ms / --perf-slo-itl-ms
    format: str = ""  # the export format served (the server triton-perf starts; "" with --url)
    # over the point's whole load (warm-up included): its requests, the failed ones, and
    # these by reason ([{kind, text, count, example}], failed_requests.py), most frequent first
    total_requests: int | None = None
    total_failures: int | None = None
    failure_reasons: list[dict[str, Any]] = field(default_factory=list, compare=False)

    @property
    def reasons(self) -> FailureTally:
        """The point's failed requests by reason (its whole load)."""
        return tally_of(self.failure_reasons)

    @property
    def failed_requests(self) -> int:
        """Failed requests over the point's whole load (its measured windows' where older
        points lack the whole load's count)."""
        return self.failures if self.total_failures is None else self.total_failures

    @property
    def fail_ratio(self) -> float:
        """Failed / all requests over the point's whole load."""
        total = self.requests if self.total_requests is None else self.total_requests
        return self.failed_requests / total if total else 0.0

    @property
    def sequences_per_s(self) -> float | None:
        if self.sequences is None:
            return None
        return self.sequences / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def load(self) -> str:
        """How load was offered: 'concurrency 8' or 'rate 100 req/s'."""
        if self.request_rate_asked:
            return f"rate {self.request_rate_asked:g} req/s"
        return f"concurrency {self.concurrency}"

    def successful_samples(self) -> int:
        return self.successes * self.batch_size

    @property
    def client_overhead_ms(self) -> float:
        """Client latency not spent in the server: network, serialization, the generator."""
        return self.avg_ms - self.server_request_us / 1e3 if self.server_request_us else math.nan

    def latency(self, percentile: int) -> float:
        return {50: self.p50_ms, 90: self.p90_ms, 95: self.p95_ms, 99: self.p99_ms}[percentile]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "throughput": self.throughput, "request_rate": self.request_rate}


def _load_range(text: str, number: Callable[[str], float], example: str, what: str) -> list[float]:
    """START[:END[:STEP]] (inclusive; STEP 1 by default) or a comma list of numbers > 0."""
    try:
        if "," in text:
            values = [number(v) for v in text.split(",") if v.strip()]
        else:
            parts = [number(v) for v in text.split(":")]
            if not 1 <= len(parts) <= 3:
                raise ValueError
            start = parts[0]
            end = parts[1] if len(parts) > 1 else start
            step = parts[2] if len(parts) > 2 else 1
            if step <= 0 or end < start:
                raise ValueError
            count = math.floor((end - start) / step + 1e-9) + 1
            values = [start + i * step for i in range(count)]
    except ValueError:
        raise ValueError(
            f"{text!r} is not START[:END[:STEP]] (e.g. {example}) or a comma list of {what}"
        ) from None
    if not values or min(values) <= 0 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"{text!r}: values must be {what} (START[:END[:STEP]] or a comma list)")
    return values


def parse_range(text: str) -> list[int]:
    """perf_analyzer's START[:END[:STEP]] (inclusive), or a comma list: '2:16:2', '1,2,4,8'."""
    return [int(v) for v in _load_range(text, int, "2:16:2", "positive integers")]


def parse_rate_range(text: str) -> list[float]:
    """perf_analyzer's --request-rate-range START[:END[:STEP]] (floats, inclusive), or a comma
    list: '50:200:50', '10,100'."""
    return _load_range(text, float, "50:200:50", "request rates > 0")


# -- latency-bounded search -----------------------------------------------------------------
def holds(
    point: Point, bound_ms: float, percentile: int = 99, goodput: float | None = None
) -> bool:
    """A point within the bound: no failed request and its latency percentile within
    `bound_ms`; with `goodput`, at least that share of its requests within `bound_ms` instead
    (the point's goodput, measured against that SLO)."""
    if point.failures or not point.successes:
        return False
    if goodput is not None:
        return point.goodput is not None and point.goodput >= goodput
    return point.latency(percentile) <= bound_ms


def largest_within_bound(
    points: Iterable[Point], bound_ms: float, percentile: int = 99, goodput: float | None = None
) -> Point | None:
    """The point offering the most load (concurrency, or request rate in an open loop) that
    holds the bound (see `holds`) with a stable measurement; None when even the smallest one
    exceeds it."""
    ok = [p for p in points if p.stable and holds(p, bound_ms, percentile, goodput)]
    return max(
        ok, key=lambda p: (p.request_rate_asked or 0, p.concurrency, p.throughput), default=None
    )


def bound_search(
    measure: Callable[[int], Point],
    bound_ms: float,
    low: int,
    high: int,
    percentile: int = 99,
    goodput: float | None = None,
) -> Iterator[Point]:
    """Double the concurrency from `low` until the percentile exceeds the bound (or `high` is
    reached), then bisect between the last point within it and the first beyond it. Yields
    every point measured; latency is assumed to grow with concurrency, as it does once the
    server is saturated."""

    def within(p: Point) -> bool:
        return holds(p, bound_ms, percentile, goodput)

    good: int | None = None
    bad: int | None = None
    concurrency = low
    while True:
        point = measure(concurrency)
        yield point
        if within(point):
            good = concurrency
            if concurrency >= high:
                return
            concurrency = min(concurrency * 2, high)
        else:
            bad = concurrency
            break
    if good is None:
        return  # even `low` exceeds the bound
    while bad - good > 1:
        middle = (good + bad) // 2
        point = measure(middle)
        yield point
        if within(point):
            good = middle
        else:
            bad = middle


def bound_summary(
    best: Point | None, bound_ms: float, percentile: int, unit: str, goodput: float | None = None
) -> str:
    if best is None:
        if goodput is not None:
            return f"goodput {goodput:g} within {bound_ms:g} ms: not met at any measured load"
        return f"p{percentile} latency bound {bound_ms:g} ms: not met at any measured concurrency"
    load = (
        f"an open-loop rate of {best.request_rate_asked:g} req/s"
        if best.request_rate_asked
        else f"{best.concurrency} concurrent requests"
    )
    if goodput is not None:
        what = f"goodput {goodput:g} within {bound_ms:g} ms"
        return (
            f"{what}: up to {load} of batch {best.batch_size} (goodput "
            f"{best.goodput or 0:.4f}, p{percentile} {best.latency(percentile):.2f} ms), "
            f"{best.throughput:,.1f} {unit}"
        )
    per_window = best.throughput * bound_ms / 1e3
    return (
        f"p{percentile} latency bound {bound_ms:g} ms: up to {load} "
        f"of batch {best.batch_size} (p{percentile} {ms_text(best.latency(percentile))} "
        f"ms), {best.throughput:,.1f} {unit} - {per_window:,.0f} samples within "
        f"{bound_ms:g} ms"
    )
