"""Soak: the server's memory and latency over a long run, and the targets on them.

During a run (`--triton-soak`) the Locust master scrapes Triton's Prometheus endpoint and, where
the server runs on this machine, the RSS of tritonserver and its python stubs once a second
(load/runner/scrape.py); this module parses what it scraped, finds the server's process, fits
the memory slope, compares the p99 of the run's first and last thirds, and draws both over
time. No locust import.

- memory growth (`perf_memory_growth_mb_per_min`): the least-squares slope of the server's
  memory over the steady part of the run (its last two thirds after the warm-up: the first
  third is left to caches, pools and lazy imports filling up), in MB (2**20 bytes) a minute;
  RSS where the server is local, else Triton's `nv_cpu_memory_used_bytes` (the machine's).
- p99 drift (`perf_p99_drift`): the p99 of the requests in the last third of the run after
  the warm-up over that of the first third, minus one, in percent.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from pytest_triton.load.measure.goodput import requests_between
from pytest_triton.load.measure.window_log import WindowLog

MB = 2**20
_LINE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)"
)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

# What a sample keeps: Triton's counters summed over models and versions, its gauges summed
# (memory) or averaged (utilization) over devices.
SUMMED = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_cpu_memory_used_bytes",
    "nv_cpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_memory_total_bytes",
)
AVERAGED = ("nv_cpu_utilization", "nv_gpu_utilization", "nv_gpu_power_usage")


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus' text format: (name, labels, value) per sample line."""
    samples = []
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match is None or line.startswith("#"):
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        samples.append((match["name"], labels, value))
    return samples


def summarize(text: str) -> dict[str, float]:
    """The figures a soak keeps from one scrape (a metric the server does not report is
    absent: the CPU build has no GPU metrics)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, _labels, value in parse_metrics(text):
        if name in SUMMED or name in AVERAGED:
            sums[name] = sums.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
    return {n: (v / counts[n] if n in AVERAGED else v) for n, v in sums.items()}


# -- the server's process ------------------------------------------------------------------
def listening_process(port: int) -> psutil.Process | None:
    """The process on this machine listening on a TCP port (None when none is, or it is
    another user's that this one may not see)."""
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            listens = conn.status == psutil.CONN_LISTEN and conn.laddr
            if listens and conn.laddr.port == port and conn.pid:
                return psutil.Process(conn.pid)
    return None


def tree_rss(process: psutil.Process) -> int | None:
    """RSS of a process and its descendants (tritonserver and its python stubs), in bytes;
    None once the process is gone."""
    try:
        procs = [process, *process.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


# -- samples and figures -------------------------------------------------------------------
@dataclass(frozen=True)
class SoakSample:
    at: float  # wall clock
    metrics: dict[str, float]
    rss: int | None  # bytes, tritonserver + stubs, where local

    def memory(self) -> float | None:
        """The memory the gate follows, in bytes: RSS where known, else Triton's CPU memory."""
        if self.rss is not None:
            return float(self.rss)
        return self.metrics.get("nv_cpu_memory_used_bytes")

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at, "rss": self.rss, **self.metrics}


def slope_per_min(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute (NaN with fewer than 3)."""
    if len(points) < 3:
        return math.nan
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return math.nan
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


@dataclass
class SoakFigures:
    memory_source: str  # "rss" or "nv_cpu_memory_used_bytes" or "none"
    memory_growth_mb_per_min: float
    memory_first_mb: float
    memory_last_mb: float
    p99_first_ms: float
    p99_last_ms: float
    p99_drift_pct: float
    steady_from: float  # wall clock
    samples: list[SoakSample] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)  # plot file names

    def text(self) -> str:
        src = {"rss": "RSS of tritonserver + stubs", "none": "not measured"}.get(
            self.memory_source, f"Triton's {self.memory_source}"
        )
        return "\n".join(
            [
                f"Soak: {len(self.samples)} samples of the server's metrics",
                f"  memory ({src}): {self.memory_first_mb:.1f} -> {self.memory_last_mb:.1f} MB, "
                f"slope over the steady part {self.memory_growth_mb_per_min:+.2f} MB/min",
                f"  p99: first third {self.p99_first_ms:.2f} ms, last third "
                f"{self.p99_last_ms:.2f} ms, drift {self.p99_drift_pct:+.1f}%",
                *([f"  plots: {', '.join(self.figures)}"] if self.figures else []),
            ]
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "memory_source": self.memory_source,
            "memory_growth_mb_per_min": self.memory_growth_mb_per_min,
            "memory_first_mb": self.memory_first_mb,
            "memory_last_mb": self.memory_last_mb,
            "p99_first_ms": self.p99_first_ms,
            "p99_last_ms": self.p99_last_ms,
            "p99_drift_pct": self.p99_drift_pct,
            "steady_from": self.steady_from,
            "figures": self.figures,
            "samples": [s.as_dict() for s in self.samples],
        }


def soak_figures(
    samples: Sequence[SoakSample], log: WindowLog | None, first: float, last: float
) -> SoakFigures:
    """The soak's figures over the run from `first` (the end of its warm-up) to `last`."""
    third = (last - first) / 3
    steady = first + third
    source = "none"
    if any(s.rss is not None for s in samples):
        source = "rss"
    elif any("nv_cpu_memory_used_bytes" in s.metrics for s in samples):
        source = "nv_cpu_memory_used_bytes"
    memory = [(s.at, m) for s in samples if (m := s.memory()) is not None]
    in_steady = [(t - steady, m / MB) for t, m in memory if steady <= t <= last]
    nan = math.nan
    p99_first = p99_last = nan
    if log is not None and third > 0:
        p99_first = requests_between(log, first, steady).histogram.percentile_ms(99)
        p99_last = requests_between(log, last - third, last).histogram.percentile_ms(99)
    drift = 100 * (p99_last / p99_first - 1) if p99_first > 0 else nan
    return SoakFigures(
        memory_source=source,
        memory_growth_mb_per_min=slope_per_min(in_steady),
        memory_first_mb=memory[0][1] / MB if memory else nan,
        memory_last_mb=memory[-1][1] / MB if memory else nan,
        p99_first_ms=p99_first,
        p99_last_ms=p99_last,
        p99_drift_pct=drift,
        steady_from=steady,
        samples=list(samples),
    )


def p99_per_second(log: WindowLog, first: float, last: float) -> list[tuple[float, float]]:
    """(seconds since `first`, p99 of the requests that second) over the run."""
    out = []
    t = first
    while t + 1 <= last:
        p99 = requests_between(log, t, t + 1).histogram.percentile_ms(99)
        if not math.isnan(p99):
            out.append((t - first, p99))
        t += 1
    return out


def soak_plot_names(prefix: Path) -> list[str]:
    """The file names write_soak_plots gives its plots: known before they are drawn, so the
    report can name them."""
    return [prefix.name + "-memory.png", prefix.name + "-latency.png"]


def write_soak_plots(
    figures: SoakFigures,
    log: WindowLog | None,
    started: float,
    last: float,
    prefix: Path,
    limits: Mapping[str, float | None],
) -> list[str]:
    """`PREFIX-memory.png` and `PREFIX-latency.png` (matplotlib); the names written, none
    without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prefix.parent.mkdir(parents=True, exist_ok=True)
    written = []
    samples = figures.samples
    fig, ax = plt.subplots(figsize=(8, 4.5))
    rss = [(s.at - started, s.rss / MB) for s in samples if s.rss is not None]
    if rss:
        ax.plot(*zip(*rss, strict=True), label="RSS tritonserver + stubs (MB)")
    for key, label in (
        ("nv_cpu_memory_used_bytes", "nv_cpu_memory_used (MB)"),
        ("nv_gpu_memory_used_bytes", "nv_gpu_memory_used (MB)"),
    ):
        series = [(s.at - started, s.metrics[key] / MB) for s in samples if key in s.metrics]
        if series and (key != "nv_cpu_memory_used_bytes" or not rss):
            ax.plot(*zip(*series, strict=True), label=label)
    ax.axvline(figures.steady_from - started, color="grey", linestyle=":", label="steady part")
    growth = limits.get("perf_memory_growth_mb_per_min")
    ax.set_title(
        f"Server memory: {figures.memory_growth_mb_per_min:+.2f} MB/min"
        + (f" (target <= {growth:g})" if growth is not None else "")
    )
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("MB")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    memory_name, latency_name = soak_plot_names(prefix)
    memory_path = prefix.with_name(memory_name)
    fig.tight_layout()
    fig.savefig(memory_path, dpi=100)
    plt.close(fig)
    written.append(memory_path.name)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    if log is not None:
        p99 = p99_per_second(log, started, last)
        if p99:
            ax.plot(*zip(*p99, strict=True), label="client p99 per second (ms)")
    server = _server_latency(samples, started)
    if server:
        ax.plot(*zip(*server, strict=True), label="server request duration, avg (ms)")
    target = limits.get("perf_latency_p99")
    if target is not None:
        ax.axhline(target, color="tab:red", linestyle=":", label=f"p99 target {target:g} ms")
    ax.set_title(f"Latency over time: p99 drift {figures.p99_drift_pct:+.1f}%")
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("ms")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    latency_path = prefix.with_name(latency_name)
    fig.tight_layout()
    fig.savefig(latency_path, dpi=100)
    plt.close(fig)
    written.append(latency_path.name)
    return written


def _server_latency(samples: Sequence[SoakSample], started: float) -> list[tuple[float, float]]:
    """Triton's average request duration between consecutive scrapes, in ms."""
    out = []
    for a, b in itertools.pairwise(samples):
        n = b.metrics.get("nv_inference_request_success", 0) - a.metrics.get(
            "nv_inference_request_success", 0
        )
        us = b.metrics.get("nv_inference_request_duration_us", 0) - a.metrics.get(
            "nv_inference_request_duration_us", 0
        )
        if n > 0:
            out.append((b.at - started, us / n / 1e3))
    return out
