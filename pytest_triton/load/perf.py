"""Perf sweep results: points, the latency-bounded search, and the CSV / markdown / PNG reports.

Columns follow perf_analyzer's CSV where they overlap (times in microseconds, "Inferences/
Second" counting samples); the markdown table is the seeds' (batch size or concurrency |
throughput | avg | p95 | p99 latency). No locust import here.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .targets import Rates


@dataclass(frozen=True)
class Point(Rates):
    """One measured (batch size, concurrency) point; latencies in ms, server times in us."""

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
    generator_cpu_percent: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

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


def parse_range(text: str) -> list[int]:
    """perf_analyzer's START[:END[:STEP]] (inclusive), or a comma list: '2:16:2', '1,2,4,8'."""
    try:
        if "," in text:
            values = [int(v) for v in text.split(",") if v.strip()]
        else:
            parts = [int(v) for v in text.split(":")]
            if not 1 <= len(parts) <= 3:
                raise ValueError
            start = parts[0]
            end = parts[1] if len(parts) > 1 else start
            step = parts[2] if len(parts) > 2 else 1
            if step < 1 or end < start:
                raise ValueError
            values = list(range(start, end + 1, step))
    except ValueError:
        raise ValueError(f"{text!r} is not START[:END[:STEP]] (e.g. 2:16:2) or a comma list "
                         "of positive integers") from None
    if not values or min(values) < 1:
        raise ValueError(f"{text!r}: values must be positive integers "
                         "(START[:END[:STEP]] or a comma list)")
    return values


# -- latency-bounded search -----------------------------------------------------------------
def largest_within_bound(points: Iterable[Point], bound_ms: float,
                         percentile: int = 99) -> Point | None:
    """The point with the largest concurrency whose latency percentile stays within the bound
    (and no failed request); None when even the smallest one exceeds it."""
    ok = [p for p in points if p.failures == 0 and p.successes > 0
          and p.latency(percentile) <= bound_ms]
    return max(ok, key=lambda p: (p.concurrency, p.throughput), default=None)


def bound_search(measure: Callable[[int], Point], bound_ms: float, low: int, high: int,
                 percentile: int = 99) -> Iterator[Point]:
    """Double the concurrency from `low` until the percentile exceeds the bound (or `high` is
    reached), then bisect between the last point within it and the first beyond it. Yields
    every point measured; latency is assumed to grow with concurrency, as it does once the
    server is saturated."""
    def within(p: Point) -> bool:
        return p.failures == 0 and p.successes > 0 and p.latency(percentile) <= bound_ms

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


def bound_summary(best: Point | None, bound_ms: float, percentile: int, unit: str) -> str:
    if best is None:
        return (f"p{percentile} latency bound {bound_ms:g} ms: not met at any measured "
                "concurrency")
    per_window = best.throughput * bound_ms / 1e3
    return (f"p{percentile} latency bound {bound_ms:g} ms: up to {best.concurrency} concurrent "
            f"requests of batch {best.batch_size} (p{percentile} {best.latency(percentile):.2f} "
            f"ms), {best.throughput:,.1f} {unit} - {per_window:,.0f} samples within "
            f"{bound_ms:g} ms")


# -- reports -----------------------------------------------------------------------------------
CSV_COLUMNS: tuple[tuple[str, Callable[[Point], Any]], ...] = (
    # perf_analyzer's column names (times in usec) ...
    ("Concurrency", lambda p: p.concurrency),
    ("Inferences/Second", lambda p: round(p.throughput, 3)),
    ("Server Queue", lambda p: round(p.server_queue_us)),
    ("Server Compute Input", lambda p: round(p.server_compute_input_us)),
    ("Server Compute Infer", lambda p: round(p.server_compute_infer_us)),
    ("Server Compute Output", lambda p: round(p.server_compute_output_us)),
    ("p50 latency", lambda p: round(p.p50_ms * 1e3)),
    ("p90 latency", lambda p: round(p.p90_ms * 1e3)),
    ("p95 latency", lambda p: round(p.p95_ms * 1e3)),
    ("p99 latency", lambda p: round(p.p99_ms * 1e3)),
    ("Avg latency", lambda p: round(p.avg_ms * 1e3)),
    # ... and ours
    ("Batch Size", lambda p: p.batch_size),
    ("Requests/Second", lambda p: round(p.request_rate, 3)),
    ("Request Count", lambda p: p.requests),
    ("Failure Count", lambda p: p.failures),
    ("Server Overhead", lambda p: round(p.server_overhead_us)),
    ("Server Request Latency", lambda p: round(p.server_request_us)),
    ("Server Avg Batch Size", lambda p: round(p.server_avg_batch, 3)),
    ("Client Overhead", lambda p: "" if math.isnan(p.client_overhead_ms)
     else round(p.client_overhead_ms * 1e3)),
    ("Generator CPU %", lambda p: "" if p.generator_cpu_percent is None
     else round(p.generator_cpu_percent, 1)),
)


def write_csv(points: Sequence[Point], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([name for name, _ in CSV_COLUMNS])
        for p in points:
            writer.writerow([get(p) for _, get in CSV_COLUMNS])


def markdown_table(points: Sequence[Point], unit: str = "infer/s") -> str:
    """The seeds' table; the first column is whatever varies (batch size, concurrency, both)."""
    batches = {p.batch_size for p in points}
    concurrencies = {p.concurrency for p in points}
    keys: list[tuple[str, Callable[[Point], int]]] = []
    if len(batches) > 1 or len(concurrencies) == 1:
        keys.append(("Batch Size", lambda p: p.batch_size))
    if len(concurrencies) > 1:
        keys.append(("Concurrency", lambda p: p.concurrency))
    header = [f"**{k}**" for k, _ in keys] + [
        "**Throughput**", "**Avg Latency**", "**95% Latency**", "**99% Latency**"]
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("-" * (len(h) + 2) for h in header) + "|"]
    for p in sorted(points, key=lambda p: (p.batch_size, p.concurrency)):
        cells = [str(get(p)) for _, get in keys] + [
            f"{p.throughput:.1f} {unit}", f"{p.avg_ms:.2f} ms", f"{p.p95_ms:.2f} ms",
            f"{p.p99_ms:.2f} ms"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(points: Sequence[Point], path: Path, *, title: str, unit: str = "infer/s",
         bound_ms: float | None = None, percentile: int = 99) -> None:
    """Latency (avg and the percentile) against throughput, one line per batch size, each
    point labelled with its concurrency (or batch size, when only that varies)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    batches = sorted({p.batch_size for p in points})
    by_batch_only = len({p.concurrency for p in points}) == 1 and len(batches) > 1
    groups = [sorted(points, key=lambda p: p.batch_size)] if by_batch_only else [
        sorted((p for p in points if p.batch_size == b), key=lambda p: p.concurrency)
        for b in batches]
    for group in groups:
        label = "" if by_batch_only else f"batch {group[0].batch_size} "
        xs = [p.throughput for p in group]
        line = ax.plot(xs, [p.latency(percentile) for p in group], marker="o",
                       label=f"{label}p{percentile}")[0]
        ax.plot(xs, [p.avg_ms for p in group], marker=".", linestyle="--",
                color=line.get_color(), label=f"{label}avg")
        for p in group:
            tag = f"b{p.batch_size}" if by_batch_only else f"c{p.concurrency}"
            ax.annotate(tag, (p.throughput, p.latency(percentile)), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
    if bound_ms is not None:
        ax.axhline(bound_ms, color="grey", linestyle=":", label=f"bound {bound_ms:g} ms")
    ax.set_xlabel(f"throughput ({unit})")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
