"""The end of a run: client figures from Locust's statistics, the verdict against the targets,
the process exit code, and the printed and JSON reports."""

from __future__ import annotations

import json
from pathlib import Path

from locust import log as locust_log
from locust.env import Environment

from . import targets as tg
from .run import LoadRun, current_host
from .server_report import generator_warnings


def measured(environment: Environment) -> tg.Measured:
    """The run's client-side figures from Locust's (aggregated) statistics."""
    total = environment.stats.total
    duration = 0.0
    if total.last_request_timestamp and total.start_time:
        duration = max(total.last_request_timestamp - total.start_time, 1e-9)
    nan = float("nan")
    any_ = total.num_requests > 0
    return tg.Measured(
        requests=total.num_requests,
        failures=total.num_failures,
        samples=total.total_content_length,
        duration_s=duration,
        avg_ms=total.avg_response_time if any_ else nan,
        p95_ms=total.get_response_time_percentile(0.95) if any_ else nan,
        p99_ms=total.get_response_time_percentile(0.99) if any_ else nan,
        p50_ms=total.get_response_time_percentile(0.5) if any_ else nan,
    )


def judge(run: LoadRun) -> None:
    """Judge the run once (Locust shuts down twice on SIGTERM) and set the exit code."""
    environment = run.environment
    if run.result:
        set_exit_code(environment, not run.result["passed"])
        return
    run.finish()
    figures = measured(environment)
    checks = tg.evaluate(tg.Targets.from_config(run.config), figures)
    failed = tg.failures(checks)
    warnings = generator_warnings(cpu_percent=run.cpu_percent, cpu_warning=run.cpu_warning,
                                  reports=run.reports)
    run.summary = "\n\n".join([
        f"Client: {figures.requests} requests ({figures.failures} failed) in "
        f"{figures.duration_s:.1f}s: {figures.request_rate:.1f} req/s, "
        f"{figures.throughput:.1f} samples/s",
        *(r.text() for r in run.reports),
        *warnings,
        tg.verdict_table(checks, "Verdict (pytest-triton targets)"),
    ])
    run.result = {
        "host": current_host(environment),
        "passed": not failed,
        "checks": [vars(c) for c in checks],
        "measured": {**vars(figures), "throughput": figures.throughput,
                     "request_rate": figures.request_rate, "fail_ratio": figures.fail_ratio},
        "server": [r.as_dict() for r in run.reports],
        "generator_cpu_percent": run.cpu_percent,
        "warnings": warnings,
    }
    set_exit_code(environment, bool(failed))


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
    if run.config.report_json and run.result:
        path = Path(run.config.report_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**run.result, "exit_code": exit_code}, indent=2,
                                   default=str))
