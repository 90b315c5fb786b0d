"""Traffic shapes as stages, and each stage judged on its own requests (no locust import).

A shape (`--triton-shape steps|ramp|spike|replay`) is a list of stages of
`--triton-shape-step-s` each; a stage's load is a number of users (closed loop) or a total
request rate (open loop: with --triton-request-rate, and always for a replayed trace). The
Locust side (load/runner/shapes.py) follows `load_at`; at the end every stage is cut from the
request log after a settling time (the run's warm-up) and judged on the latency, failure and
goodput targets, so a release sees at which load a target broke.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.goodput import goodput_of, requests_between
from pytest_triton.load.measure.window_log import WindowLog

STAGE_TARGETS = ("perf_latency_avg", "perf_latency_p95", "perf_latency_p99", "perf_fail_ratio")
"""Targets every stage is judged on (and perf_goodput); throughput stays a whole-run target:
a floor for the busiest stage would fail the quiet ones."""


@dataclass(frozen=True)
class Stage:
    index: int  # from 1
    start_s: float  # since the shape started
    duration_s: float
    load: float  # users, or req/s in an open loop; a ramp's stage goes from load to end_load
    end_load: float
    unit: str  # "users" or "req/s"

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    def load_at(self, t: float) -> float:
        share = min(max((t - self.start_s) / self.duration_s, 0.0), 1.0)
        return self.load + (self.end_load - self.load) * share

    @property
    def label(self) -> str:
        if math.isclose(self.load, self.end_load):
            return f"{self.load:g} {self.unit}"
        return f"{self.load:g} -> {self.end_load:g} {self.unit}"


@dataclass(frozen=True)
class Arrival:
    at_s: float  # since the replay started
    batch_size: int


def read_trace(path: str | Path) -> list[Arrival]:
    """A recorded trace: CSV rows of arrival time (s from the start) and batch size; a header
    row and blank lines are skipped; rows are sorted by time."""
    arrivals: list[Arrival] = []
    try:
        with open(path, newline="") as f:
            for number, row in enumerate(csv.reader(f), start=1):
                cells = [c.strip() for c in row]
                if not any(cells) or cells[0].startswith("#"):
                    continue
                try:
                    at, batch = float(cells[0]), int(cells[1]) if len(cells) > 1 else 1
                except ValueError:
                    if number == 1:
                        continue  # a header
                    raise ConfigError(
                        f"--triton-replay {path}: row {number} is not 'seconds,batch_size': {row}"
                    ) from None
                if at < 0 or not math.isfinite(at) or batch < 1:
                    raise ConfigError(
                        f"--triton-replay {path}: row {number} needs a time >= 0 and a batch "
                        f"size >= 1: {row}"
                    )
                arrivals.append(Arrival(at, batch))
    except OSError as exc:
        raise ConfigError(f"--triton-replay: cannot read {path}: {exc}") from None
    if not arrivals:
        raise ConfigError(f"--triton-replay {path}: no arrivals in the trace")
    return sorted(arrivals, key=lambda a: a.at_s)


def open_loop_shape(config: TritonConfig) -> bool:
    return config.load.shape == "replay" or bool(config.load.request_rate)


def stages_of(config: TritonConfig, trace: Sequence[Arrival] | None = None) -> list[Stage]:
    """The shape's stages ([] without a shape)."""
    kind, step = config.load.shape, config.load.shape_step_s
    unit = "req/s" if open_loop_shape(config) else "users"
    values = list(config.load.shape_steps)
    if kind == "none":
        return []
    if kind == "replay":
        arrivals = trace if trace is not None else read_trace(config.load.replay or "")
        count = max(1, math.ceil((arrivals[-1].at_s + 1e-9) / step))
        rates = [
            sum(1 for a in arrivals if i * step <= a.at_s < (i + 1) * step) / step
            for i in range(count)
        ]
        return [Stage(i + 1, i * step, step, r, r, "req/s") for i, r in enumerate(rates)]
    if kind == "spike":
        base, peak = values[0], max(values)
        values = [base, peak, base]
    ends = values[1:] + values[-1:] if kind == "ramp" else values
    return [
        Stage(i + 1, i * step, step, v, e, unit)
        for i, (v, e) in enumerate(zip(values, ends, strict=True))
    ]


def load_at(stages: Sequence[Stage], t: float) -> float | None:
    """The load at `t` seconds since the shape started; None once the last stage is over."""
    for stage in stages:
        if stage.start_s <= t < stage.end_s:
            return stage.load_at(t)
    return None


# -- the verdict per stage -------------------------------------------------------------------
@dataclass(frozen=True)
class StageResult:
    stage: Stage
    figures: tg.Measured
    checks: list[tg.Check]

    @property
    def passed(self) -> bool:
        return not tg.failures(self.checks)

    def as_dict(self) -> dict[str, Any]:
        f = self.figures
        return {
            "index": self.stage.index,
            "label": self.stage.label,
            "start_s": self.stage.start_s,
            "duration_s": self.stage.duration_s,
            "load": self.stage.load,
            "end_load": self.stage.end_load,
            "unit": self.stage.unit,
            "requests": f.requests,
            "failures": f.failures,
            "throughput": f.throughput,
            "request_rate": f.request_rate,
            "avg_ms": f.avg_ms,
            "p50_ms": f.p50_ms,
            "p95_ms": f.p95_ms,
            "p99_ms": f.p99_ms,
            "goodput": f.goodput,
            "passed": self.passed,
            "checks": [vars(c) for c in self.checks],
        }


def judge_stages(
    log: WindowLog,
    stages: Sequence[Stage],
    started_at: float,
    stopped_at: float,
    config: TritonConfig,
) -> list[StageResult]:
    """Each stage that ran, from `started_at` (wall clock of the shape's start): its requests
    after a settling time (the run's warm-up, at most half the stage) up to its end."""
    settle = config.measurement.load_warmup / 1e3
    limits = {name: config.value(name) for name in STAGE_TARGETS}
    limits["perf_goodput"] = config.gate.perf_goodput
    targets = tg.Targets(**limits)
    slo = config.gate.perf_slo_ms
    results = []
    for stage in stages:
        first = started_at + stage.start_s + min(settle, stage.duration_s / 2)
        last = min(started_at + stage.end_s, stopped_at)
        if last <= first:
            break  # the run stopped before this stage settled
        requests = requests_between(log, first, last)
        pct = requests.histogram.percentiles_ms([50, 95, 99])
        nan = math.nan
        figures = tg.Measured(
            requests=requests.requests,
            failures=requests.failures,
            samples=requests.samples,
            duration_s=last - first,
            avg_ms=requests.avg_ms,
            p95_ms=pct[95],
            p99_ms=pct[99],
            p50_ms=pct[50],
            goodput=goodput_of(requests, slo) if slo else nan,
        )
        checks = [c for c in tg.evaluate(targets, figures) if c.passed is not None]
        results.append(StageResult(stage, figures, checks))
    return results


def stages_table(results: Sequence[StageResult], unit: str = "samples/s") -> str:
    """One row per stage: its load, requests, failures, throughput, p99, goodput, verdict."""
    lines = [
        f"{'stage':>5}  {'load':>16}  {'requests':>8}  {'failed':>6}  {unit:>12}  "
        f"{'p99 ms':>8}  {'goodput':>7}  verdict"
    ]
    for r in results:
        f = r.figures
        failed = "; ".join(f"{c.label} {tg.describe_failure(c)}" for c in tg.failures(r.checks))
        verdict = "FAIL - " + failed if failed else ("PASS" if r.checks else "no target")
        goodput = "-" if math.isnan(f.goodput) else f"{f.goodput:.4f}"
        lines.append(
            f"{r.stage.index:>5}  {r.stage.label:>16}  {f.requests:>8}  {f.failures:>6}  "
            f"{f.throughput:>12,.1f}  {f.p99_ms:>8.2f}  {goodput:>7}  {verdict}"
        )
    return "\n".join(lines)


def stage_check(result: StageResult) -> tg.Check:
    """A stage as one row of the run's verdict (its p99 as the figure)."""
    failed = tg.failures(result.checks)
    return tg.Check(
        f"stage {result.stage.index} ({result.stage.label}) p99 (ms)",
        "",
        "max",
        None,
        result.figures.p99_ms,
        None if not result.checks else not failed,
        "; ".join(f"{c.label} {tg.describe_failure(c)}" for c in failed) if failed else "",
    )
