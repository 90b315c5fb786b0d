"""The end of a run: client figures from Locust's statistics, the verdict against the targets,
the process exit code, and the printed and JSON reports."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

from locust import log as locust_log
from locust.env import Environment
from locust.stats import StatsError

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import WrongAnswer
from pytest_triton.load.locust.arrivals import rate_warning
from pytest_triton.load.locust.distributed import worker_offsets
from pytest_triton.load.locust.recording import schedule_lag, window_log
from pytest_triton.load.locust.run import LoadRun, current_host
from pytest_triton.load.locust.shapes import shape_of
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.goodput import goodput_between
from pytest_triton.load.measure.latency_histogram import ms_text
from pytest_triton.load.measure.server_side import generator_warnings
from pytest_triton.load.measure.soak import SoakFigures, soak_figures, write_soak_plots
from pytest_triton.load.measure.stages import StageResult, judge_stages, stage_check, stages_table
from pytest_triton.load.measure.window_log import Slice
from pytest_triton.load.measure.windows import (
    PERCENTILES,
    Criterion,
    Stability,
    assess,
    windows_table,
)


def measured(environment: Environment) -> tg.Measured:
    """The run's client-side figures: requests and duration from Locust's (aggregated)
    statistics; latencies (us resolution) and samples from the request log, whose histograms
    the workers send with their reports (request events report bytes as their response
    length, not samples). Locust's own percentiles, whole ms below 100 ms, stay in its UI."""
    total = environment.stats.total
    requests = window_log(environment)
    duration = 0.0
    if total.last_request_timestamp and total.start_time:
        duration = max(total.last_request_timestamp - total.start_time, 1e-9)
    logged = requests.total() if requests is not None else Slice()
    pct = logged.histogram.percentiles_ms(PERCENTILES)
    avg_ms = logged.avg_ms
    if total.num_requests and total.num_failures >= total.num_requests:
        # every request failed: their latencies are no answer's, so none is reported
        pct, avg_ms = dict.fromkeys(pct, math.nan), math.nan
    return tg.Measured(
        requests=total.num_requests,
        failures=total.num_failures,
        samples=logged.samples,
        duration_s=duration,
        avg_ms=avg_ms,
        p95_ms=pct[95],
        p99_ms=pct[99],
        p50_ms=pct[50],
        wrong_answers=wrong_answers(environment),
    )


WRONG_ANSWER = WrongAnswer.__name__ + "("


def wrong_answers(environment: Environment) -> int:
    """Failed requests whose answer was wrong (users.py reports them as WrongAnswer): from
    Locust's error table, which holds every worker's too."""
    return sum(
        e.occurrences
        for e in environment.stats.errors.values()
        if StatsError.parse_error(e.error).startswith(WRONG_ANSWER)
    )


# How much longer than --triton-load-warmup a warm-up may last while the rate settles.
MAX_SETTLE_S = 30.0


@dataclasses.dataclass(frozen=True)
class Warmup:
    """The run's warm-up: from the load's first request, `seconds` long; `settled` says whether
    the request rate had settled then (None: not looked for, --triton-fixed-warmup)."""

    begun: float
    seconds: float
    settled: bool | None

    def text(self) -> str:
        how = {
            None: "fixed",
            True: "until the request rate settled",
            False: "the rate had not settled by then",
        }[self.settled]
        return f"warm-up {self.seconds:.1f}s ({how})"


def warmup_of(run: LoadRun) -> Warmup | None:
    """The warm-up not measured: at least --triton-load-warmup, then (unless
    --triton-fixed-warmup) whole seconds more until the request rate settles, leaving room
    for the windows a stable measurement needs (None before a run)."""
    log = window_log(run.environment)
    if log is None or not run.started_at:
        return None
    c = run.config.measurement
    begun = max(run.started_at, log.cleared_at, log.first_at or 0.0)  # warm-up from load's start
    minimum = c.load_warmup / 1e3
    if c.fixed_warmup or shape_of(run.environment) is not None:
        return Warmup(begun, minimum, None)
    end = run.stopped_at or time.time()
    room = end - begun - c.stability_windows * c.measurement_interval / 1e3
    if c.measurement_mode != "time_windows":
        room = end - begun - 3.0
    settled = log.settled_after(
        begun,
        end,
        minimum_s=minimum,
        latest_s=min(room, minimum + MAX_SETTLE_S),
        tolerance_pct=c.stability_percentage,
    )
    return Warmup(begun, minimum if settled is None else settled, settled is not None)


def measured_span(run: LoadRun) -> tuple[float, float] | None:
    """Wall-clock times from the end of the run's warm-up to its stop (None before a run)."""
    warmup = warmup_of(run)
    if warmup is None:
        return None
    return warmup.begun + warmup.seconds, run.stopped_at or time.time()


def run_goodput(run: LoadRun) -> float:
    """The share of the requests after the warm-up answered successfully within
    --perf-slo-ms (NaN without an SLO)."""
    log, span, slo = window_log(run.environment), measured_span(run), run.config.gate.perf_slo_ms
    if log is None or span is None or slo is None:
        return math.nan
    return goodput_between(log, *span, slo)


def soak_of(run: LoadRun) -> SoakFigures | None:
    """The soak's figures, and its plots beside the JSON report (None without a soak)."""
    log, span = window_log(run.environment), measured_span(run)
    if run.scraper is None or span is None:
        return None
    soak = soak_figures(run.scraper.samples, log, *span)
    if run.config.load.report_json:
        path = Path(run.config.load.report_json)
        limits = {
            name: run.config.value(name)
            for name in ("perf_memory_growth_mb_per_min", "perf_latency_p99")
        }
        soak.figures = write_soak_plots(
            soak, log, run.started_at, span[1], path.with_name(path.stem), limits
        )
    return soak


def stage_results(run: LoadRun) -> list[StageResult] | None:
    """Each stage of the run's traffic shape judged on its own (None without a shape)."""
    shape, log = shape_of(run.environment), window_log(run.environment)
    if shape is None or log is None or not run.started_at:
        return None
    return judge_stages(
        log, shape.stages, shape.started_at, run.stopped_at or time.time(), run.config
    )


def stability_of(run: LoadRun) -> Stability | None:
    """The run cut into measurement windows after its warm-up, and whether they agree (not
    asked of a shaped run: its load changes by design, each stage is judged instead)."""
    log = window_log(run.environment)
    if log is None or not run.started_at or shape_of(run.environment) is not None:
        return None
    c = run.config
    warmup = warmup_of(run)
    assert warmup is not None  # a log and a start, as checked above
    windows = log.windows(
        warmup.begun,
        run.stopped_at or time.time(),
        warmup_s=warmup.seconds,
        interval_s=c.measurement.measurement_interval / 1e3,
        mode=c.measurement.measurement_mode,
        request_count=c.measurement.measurement_request_count,
    )
    return assess(
        windows, Criterion(c.measurement.stability_windows, c.measurement.stability_percentage)
    )


# Targets on speed: an unstable measurement makes them meaningless, so it fails the run; with
# none set, instability is a warning with advice (a newcomer's first short run is not a gate).
SPEED_TARGETS = ("perf_latency_avg", "perf_latency_p95", "perf_latency_p99", "perf_throughput")


def gates_on_speed(config: TritonConfig) -> bool:
    return any(config.value(name) is not None for name in SPEED_TARGETS)


def unstable_advice(stability: Stability) -> str:
    return (
        f"WARNING: the measurement is not stable ({stability.summary()}). No latency or "
        "throughput target is set, so this does not fail the run; to measure for real, run "
        "longer (-t), lengthen the windows (--triton-measurement-interval) or the warm-up "
        "(--triton-load-warmup), then gate with --perf-latency-p99 / --perf-throughput."
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


def judge_run(run: LoadRun) -> None:
    """Judge the run once (Locust shuts down twice on SIGTERM) and set the exit code."""
    environment = run.environment
    if run.result:
        set_exit_code(environment, not run.result["passed"])
        return
    run.finish()
    run.settle_reports()  # workers' final reports may have come in since the test stopped
    figures = dataclasses.replace(measured(environment), goodput=run_goodput(run))
    soak = soak_of(run)
    if soak is not None:
        figures = dataclasses.replace(
            figures,
            memory_growth_mb_per_min=soak.memory_growth_mb_per_min,
            p99_drift_pct=soak.p99_drift_pct,
        )
    stability = stability_of(run)
    basis: tg.Rates = figures
    if stability is not None and stability.measurement is not None:
        basis = stability.measurement
    checks = tg.evaluate(tg.Targets.from_config(run.config), basis, figures)
    speed = gates_on_speed(run.config)
    if stability is not None:
        allowed = run.config.measurement.allow_unstable or not speed
        checks.append(stability_check(stability, allowed))
    stages = stage_results(run)
    checks += [stage_check(r) for r in stages or []]
    update = (
        run.update.figures(window_log(environment), run.stopped_at or time.time())
        if run.update is not None
        else None
    )
    checks += update_checks(update) if update is not None else []
    failed = tg.failures(checks)
    warnings = generator_warnings(
        cpu_percent=run.cpu_percent, cpu_warning=run.cpu_warning, reports=run.reports
    )
    if stability is not None and not stability.stable and not speed:
        warnings.append(unstable_advice(stability))
    outside = requests_outside_run(run)
    if outside:
        warnings.append(
            f"WARNING: {outside} requests were logged outside the run's time span on the "
            "master's clock: a worker's clock is off by more than its measured offset "
            f"({offsets_text(worker_offsets(environment))})"
        )
    loop = "closed loop"
    if run.config.load.request_rate:
        loop = (
            f"open loop at {run.config.load.request_rate:g} req/s "
            f"({run.config.load.request_distribution} arrivals)"
        )
        sent = (basis.requests / basis.duration_s) if basis.duration_s else 0.0
        warning = rate_warning(run.config.load.request_rate, sent, schedule_lag(environment))
        warnings += [warning] if warning else []
    run.summary = "\n\n".join(
        [
            f"Client ({loop}): {figures.requests} requests ({figures.failures} failed, "
            f"{figures.wrong_answers} of them wrong answers) in "
            f"{figures.duration_s:.1f}s: {figures.request_rate:.1f} req/s, "
            f"{figures.throughput:.1f} samples/s",
            *([windows_text(stability, warmup_of(run))] if stability is not None else []),
            *(
                [f"Stages ({run.config.load.shape}):\n{stages_table(stages)}"]
                if stages is not None
                else []
            ),
            *(
                [f"Worker clocks, offset to the master's: {offsets_text(offsets)}"]
                if (offsets := worker_offsets(environment))
                else []
            ),
            *(r.text() for r in run.reports),
            *([soak.text()] if soak is not None else []),
            *([update_text(update)] if update is not None else []),
            *warnings,
            tg.verdict_table(checks, "Verdict (pytest-triton targets)"),
        ]
    )
    run.result = {
        "host": current_host(environment),
        "passed": not failed,
        "checks": [vars(c) for c in checks],
        "measured": {
            **vars(figures),
            "throughput": figures.throughput,
            "request_rate": figures.request_rate,
            "fail_ratio": figures.fail_ratio,
            "slo_ms": run.config.gate.perf_slo_ms,
        },
        "windows": [w.as_dict() for w in stability.windows] if stability else [],
        "stability": stability.as_dict() if stability else None,
        "warmup": dataclasses.asdict(warmup) if (warmup := warmup_of(run)) else None,
        "wrong_answers": figures.wrong_answers,
        "update": update,
        "shape": run.config.load.shape if stages is not None else None,
        "stages": [r.as_dict() for r in stages] if stages is not None else None,
        "soak": soak.as_dict() if soak is not None else None,
        "figures": soak.figures if soak is not None else [],
        "server": [r.as_dict() for r in run.reports],
        "generator_cpu_percent": run.cpu_percent,
        "requests_outside_run": outside,
        "worker_clock_offsets": worker_offsets(environment),
        "warnings": warnings,
    }
    set_exit_code(environment, bool(failed))


def update_checks(update: dict[str, Any]) -> list[tg.Check]:
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


def update_text(update: dict[str, Any]) -> str:
    head = (
        f"Model update: {update['model']} version {update['old_version']} -> "
        f"{update['new_version']}"
    )
    if not update["done"]:
        return f"{head}: not done ({update['error'] or 'the run ended before it'})"
    return (
        f"{head}: both served after {update['both_served_after_s']:.2f}s, the old one retired "
        f"after {update['finished_after_s']:.2f}s; {update['requests_during_switch']} requests "
        f"answered during the switch (p99 {ms_text(update['p99_during_switch_ms'])} ms, "
        f"{update['failures_during_switch']} failed), {update['requests_after_switch']} after"
    )


def requests_outside_run(run: LoadRun) -> int:
    """Requests logged more than a second before the run started or after it stopped, on
    the master's clock (a worker's clock the offset measurement missed)."""
    log = window_log(run.environment)
    if log is None or not run.started_at:
        return 0
    return log.requests_outside(run.started_at - 1.0, (run.stopped_at or time.time()) + 1.0)


def offsets_text(offsets: dict[str, dict[str, float]]) -> str:
    if not offsets:
        return "no worker offsets measured"
    return ", ".join(
        f"{worker}: {o['offset_s'] * 1e3:+.1f} ms (round trip {o['round_trip_s'] * 1e3:.1f} ms)"
        for worker, o in sorted(offsets.items())
    )


def windows_text(stability: Stability, warmup: Warmup | None = None) -> str:
    after = f"after a {warmup.text()}, " if warmup is not None else ""
    lines = [f"Measurement windows ({after}{stability.summary()}; * = measured):"]
    if stability.windows:
        lines.append(windows_table(stability.windows, chosen=stability.chosen))
    m = stability.measurement
    if m is not None:
        lines.append(
            f"Measured: {m.throughput:,.1f} samples/s, {m.request_rate:,.1f} req/s, "
            f"avg {ms_text(m.avg_ms)} ms, p50 {ms_text(m.p50_ms)} ms, p95 {ms_text(m.p95_ms)} ms, "
            f"p99 {ms_text(m.p99_ms)} ms"
        )
    return "\n".join(lines)


def set_exit_code(environment: Environment, failed: bool) -> None:
    if environment.process_exit_code is not None and environment.process_exit_code > 1:
        return  # a refused host or a setup error already decided
    runner = environment.runner
    if failed:
        environment.process_exit_code = 1
    elif not (locust_log.unhandled_greenlet_exception or (runner and runner.exceptions)):
        environment.process_exit_code = 0  # the targets, not locust's any-error rule, decide


def report(run: LoadRun, exit_code: int) -> None:
    """After Locust's own tables: the server report and the verdict; the JSON report."""
    if run.summary and not run.printed:
        run.printed = True
        print("\n" + run.summary + "\n", flush=True)
    if run.config.load.report_json and run.result:
        path = Path(run.config.load.report_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**run.result, "exit_code": exit_code}, indent=2, default=str))
