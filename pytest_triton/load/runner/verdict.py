"""The end of a run, as one pipeline a reader can follow:

    record_of(run)          load/runner/record.py       Locust's objects -> RunRecord
    run_figures(record)     load/measure/run_figures.py  -> RunFigures (windows, stages, soak)
    judge(figures)          load/measure/run_verdict.py  targets -> RunVerdict (checks, warnings)
    run_report(...)         load/measure/run_report.py   -> the text and the JSON document
    write_run(...)          here                        the only side effects: plots, JSON

and the process exit code from the verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

from locust import log as locust_log
from locust.env import Environment

from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.run_figures import RunFigures, client_figures, run_figures
from pytest_triton.load.measure.run_report import RunReport, run_report
from pytest_triton.load.measure.run_verdict import judge
from pytest_triton.load.measure.soak import write_soak_plots
from pytest_triton.load.runner.record import record_of
from pytest_triton.load.runner.run import LoadRun


def judge_run(run: LoadRun) -> None:
    """Judge the run once (Locust shuts down twice on SIGTERM) and set the exit code."""
    if run.result:
        set_exit_code(run.environment, not run.result["passed"])
        return
    run.finish()
    run.settle_reports()  # workers' final reports may have come in since the test stopped
    figures = run_figures(record_of(run))
    verdict = judge(figures)
    written = write_run_plots(figures, run_report(figures, verdict))
    run.summary, run.result = written.text, written.document
    set_exit_code(run.environment, not verdict.passed)


def measured(run: LoadRun) -> tg.Measured:
    """The client's figures so far (the web UI's live view)."""
    return client_figures(record_of(run))


def write_run_plots(figures: RunFigures, report: RunReport) -> RunReport:
    """Draw the soak's plots where the report names them; a report without them where they
    could not be drawn (no matplotlib)."""
    if report.soak_plots is None or figures.soak is None:
        return report
    record = figures.record
    limits = {
        name: record.config.value(name)
        for name in ("perf_memory_growth_mb_per_min", "perf_latency_p99")
    }
    drawn = write_soak_plots(
        figures.soak, record.log, record.started_at, record.stopped_at, report.soak_plots, limits
    )
    if drawn:
        return report
    note = "no soak plots: matplotlib is not installed (pip install 'pytest-triton[load]')"
    document = {**report.document, "figures": [], "warnings": [*report.document["warnings"], note]}
    return RunReport(report.text.replace("  plots: ", "  plots not drawn: "), document, None)


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
