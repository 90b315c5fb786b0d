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
    targets = tg.Targets.from_config(config)
    checks = tg.evaluate(targets, figures.basis, figures.measured)
    speed = gates_on_speed(config)
    stability = figures.stability
    misses = window_misses(stability, targets) if stability is not None and speed else None
    if stability is not None:
        allowed = config.measurement.allow_unstable or not speed
        checks.append(stability_check(stability, allowed, misses))
    checks += [stage_check(r) for r in figures.stages or []]
    checks += update_checks(record.update) if record.update is not None else []
    return RunVerdict(checks, run_warnings(figures, speed, met=misses == []))


def window_misses(stability: Stability, targets: tg.Targets) -> list[str] | None:
    """Each speed target a measurement window misses, judged on that window alone
    (`window 4: perf_latency_p99 (ms) measured 130, target <= 100`); None where a speed target
    is set that a window has no figure for (targets.WHOLE_RUN: a stream's time to first token,
    tokens/s).

    A fixed-length run (Locust's -t) cannot measure on until its windows agree, as
    perf_analyzer does. Where they do not agree but none misses a target, no choice of windows
    changes the verdict, and their merge meets the targets too: its percentiles lie within
    the windows', its throughput is their duration-weighted mean."""
    limited = [name for name in SPEED_TARGETS if targets.limits[name] is not None]
    if not stability.windows or any(name in tg.WHOLE_RUN for name in limited):
        return None
    return [
        f"window {window.index}: {check.label} {tg.describe_failure(check)}"
        for window in stability.windows
        for check in tg.evaluate(targets, window)
        if check.name in limited and check.passed is not True
    ]


def run_warnings(figures: RunFigures, speed: bool, *, met: bool) -> list[str]:
    """What the reader should know before trusting the figures: a busy generator, an
    unstable measurement nobody gates on or whose every window met the targets, clocks off,
    an open loop that fell behind."""
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
    elif stability is not None and not stability.stable and met:
        warnings.append(unstable_but_met(stability))
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
        f"WARNING: the measurement is not stable ({stability.reason}). No latency or "
        "throughput target is set, so this does not fail the run; to measure for real, run "
        "longer (-t), lengthen the windows (--triton-measurement-interval) or the warm-up "
        "(--triton-load-warmup; both in ms, or with a unit: 5s), then gate with "
        "--perf-latency-p99 / --perf-throughput."
    )


def unstable_but_met(stability: Stability) -> str:
    n = len(stability.windows)
    return (
        f"WARNING: the measurement is not stable ({stability.reason}), but each of its {n} "
        "windows met every latency and throughput target, so the verdict does not depend on "
        f"the windows taken: the targets are judged on all {n}. To measure the model's figures "
        "rather than gate them, run longer (-t) on a quieter machine."
    )


def stability_check(stability: Stability, allowed: bool, misses: list[str] | None) -> tg.Check:
    """Passed when the windows agree. Else failed while a speed target is judged on them,
    naming the first window that misses one; None, with why, where the instability cannot
    change the verdict (--triton-allow-unstable, no speed target, no window misses a target:
    `misses` empty)."""
    spread = max(stability.throughput_spread_pct, stability.latency_spread_pct)
    harmless = allowed or misses == []
    if stability.stable:
        note = ""
    elif allowed:
        note = "unstable, allowed"
    elif misses == []:
        note = "unstable, every window met the targets"
    else:
        note = "measurement not stable" + (f"; {misses[0]}" if misses else "")
    return tg.Check(
        "stable windows (spread)",
        "%",
        "max",
        stability.criterion.tolerance_pct,
        spread if math.isfinite(spread) else math.nan,
        True if stability.stable else (None if harmless else False),
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
