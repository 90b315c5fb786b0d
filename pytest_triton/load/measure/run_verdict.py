"""Steps 3 and 4 of a run's verdict (measure -> figures -> targets -> verdict -> report): the
run's figures against its targets, and the warnings a reader needs beside them. Pure: figures
in, `RunVerdict` out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_triton.base.config import TritonConfig
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.arrivals import rate_warning
from pytest_triton.load.measure.run_figures import RunFigures, request_rate_sent
from pytest_triton.load.measure.server_side import generator_warnings
from pytest_triton.load.measure.stages import stage_check
from pytest_triton.load.measure.windows import Stability

# Targets on speed: an unstable measurement makes them meaningless, so it fails the run; with
# none set, instability is a warning with advice (a newcomer's first short run is not a gate).
SPEED_TARGETS = (
    "perf_latency_avg",
    "perf_latency_p95",
    "perf_latency_p99",
    "perf_throughput",
    "perf_ttft_p99",
    "perf_itl_p99",
    "perf_output_tokens_per_s",
    "perf_stream_goodput",
)


@dataclass(frozen=True)
class RunVerdict:
    checks: list[tg.Check]
    warnings: list[str]

    @property
    def passed(self) -> bool:
        return not tg.failures(self.checks)


def judge(figures: RunFigures) -> RunVerdict:
    record, config = figures.record, figures.record.config
    checks = tg.evaluate(tg.Targets.from_config(config), figures.basis, figures.measured)
    speed = gates_on_speed(config)
    if figures.stability is not None:
        allowed = config.measurement.allow_unstable or not speed
        checks.append(stability_check(figures.stability, allowed))
    checks += [stage_check(r) for r in figures.stages or []]
    checks += update_checks(record.update) if record.update is not None else []
    return RunVerdict(checks, run_warnings(figures, speed))


def run_warnings(figures: RunFigures, speed: bool) -> list[str]:
    """What the reader should know before trusting the figures: a busy generator, an
    unstable measurement nobody gates on, clocks off, an open loop that fell behind."""
    record, config = figures.record, figures.record.config
    warnings = generator_warnings(
        cpu_percent=record.cpu_percent, cpu_warning=record.cpu_warning, reports=record.reports
    )
    m, reasons = figures.measured, record.failure_reasons
    if m.failures:
        warnings.append(
            f"WARNING: {m.failures:,} of {m.requests:,} requests failed: "
            + (reasons.summary() or "reasons not recorded")
        )
    stability = figures.stability
    if stability is not None and not stability.stable and not speed:
        warnings.append(unstable_advice(stability))
    if figures.requests_outside_run:
        warnings.append(
            f"WARNING: {figures.requests_outside_run} requests were logged outside the run's "
            "time span on the master's clock: a worker's clock is off by more than its "
            f"measured offset ({offsets_text(record.offsets)})"
        )
    if config.load.request_rate:
        warning = rate_warning(config.load.request_rate, request_rate_sent(figures), record.lag)
        warnings += [warning] if warning else []
    return warnings


def gates_on_speed(config: TritonConfig) -> bool:
    return any(config.value(name) is not None for name in SPEED_TARGETS)


def unstable_advice(stability: Stability) -> str:
    return (
        f"WARNING: the measurement is not stable ({stability.summary()}). No latency or "
        "throughput target is set, so this does not fail the run; to measure for real, run "
        "longer (-t), lengthen the windows (--triton-measurement-interval) or the warm-up "
        "(--triton-load-warmup; both in ms, or with a unit: 5s), then gate with "
        "--perf-latency-p99 / --perf-throughput."
    )


def stability_check(stability: Stability, allowed: bool) -> tg.Check:
    spread = max(stability.throughput_spread_pct, stability.latency_spread_pct)
    note = (
        "" if stability.stable else ("unstable, allowed" if allowed else "measurement not stable")
    )
    return tg.Check(
        "stable windows (spread)",
        "%",
        "max",
        stability.criterion.tolerance_pct,
        spread if math.isfinite(spread) else math.nan,
        True if stability.stable else (None if allowed else False),
        note,
    )


def update_checks(update: Mapping[str, Any]) -> list[tg.Check]:
    """A model update under load passes when it finished and requests went on after it (the
    failed requests and wrong answers during it are judged by their own targets)."""
    done = bool(update["done"])
    after = int(update.get("requests_after_switch", 0))
    return [
        tg.Check("model update done", "", "min", 1, float(done), done, update["error"] or ""),
        tg.Check(
            "requests after the update",
            "",
            "min",
            1,
            float(after),
            after >= 1,
            "" if after else "none: lengthen -t or make --triton-update-at earlier",
        ),
    ]


def offsets_text(offsets: Mapping[str, Mapping[str, float]]) -> str:
    if not offsets:
        return "no worker offsets measured"
    return ", ".join(
        f"{worker}: {o['offset_s'] * 1e3:+.1f} ms (round trip {o['round_trip_s'] * 1e3:.1f} ms)"
        for worker, o in sorted(offsets.items())
    )
