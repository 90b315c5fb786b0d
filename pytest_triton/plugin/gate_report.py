"""The gate report's pytest side: record what each served test found on the test item, gather
it (also from xdist workers) and, at the end, write the report, compare with a baseline and
turn a failed verdict into the session's exit status.

Results travel as `user_properties` of the test reports (JSON strings): pytest hands them to
xdist's controller and to the JUnit XML, so nothing else needs to be shipped between
processes, and nothing is parsed from log text.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_triton.accuracy.outcome import AccuracyResult
from pytest_triton.base.config import TritonConfig
from pytest_triton.gate import baseline as gate_baseline
from pytest_triton.gate import document as gate_document
from pytest_triton.gate.environment import environment
from pytest_triton.gate.load_results import read_load_files
from pytest_triton.gate.output import save_baseline, write_report
from pytest_triton.parity.results import ParityResult
from pytest_triton.session.deployment import Deployment

CURRENT_ITEM = pytest.StashKey["pytest.Item | None"]()
PARITY_PROPERTY = "triton_parity"
ACCURACY_PROPERTY = "triton_accuracy"
SERVER_PROPERTY = "triton_server"
JUNIT_NAME = "junit.xml"


def _current(config: pytest.Config) -> pytest.Item | None:
    return config.stash.get(CURRENT_ITEM, None)


def record_result(config: pytest.Config, result: ParityResult | AccuracyResult) -> None:
    """A Deployment listener: the check's result goes onto the running test's report."""
    item = _current(config)
    if item is not None:
        name = ACCURACY_PROPERTY if isinstance(result, AccuracyResult) else PARITY_PROPERTY
        item.user_properties.append(
            (
                name,
                json.dumps(gate_document.json_safe({**result.as_dict(), "test": item.nodeid})),
            )
        )


def record_server(config: pytest.Config, deployment: Deployment) -> None:
    """Describe a server once, on the test that started it."""
    item = _current(config)
    if item is not None:
        item.user_properties.append((SERVER_PROPERTY, json.dumps(deployment.describe())))


def junit_path(triton: TritonConfig) -> str | None:
    return str(Path(triton.gate.report) / JUNIT_NAME) if triton.gate.report else None


class GateReporter:
    """Registered by the plugin in every process; the controller (or a plain session) builds
    the report when --triton-report, --triton-baseline or --triton-save-baseline is set."""

    def __init__(self, config: pytest.Config, triton: TritonConfig) -> None:
        self.config = config
        self.triton = triton
        self.collected = gate_document.Collected()
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.document: dict[str, Any] | None = None
        self.written: list[Path] = []
        self.notes: list[str] = []
        self.baseline: dict[str, Any] | None = None
        self.wanted = (
            bool(triton.gate.report or triton.gate.baseline or triton.gate.save_baseline)
            and not config.option.collectonly
        )
        self.controller = not hasattr(config, "workerinput")
        if self.wanted and self.controller and triton.gate.baseline:
            try:  # a missing or broken baseline stops the session before any test runs
                self.baseline = gate_baseline.read_baseline(Path(triton.gate.baseline))
            except gate_baseline.BaselineError as exc:
                raise pytest.UsageError(f"pytest-triton --triton-baseline: {exc}") from None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        self.config.stash[CURRENT_ITEM] = item
        try:
            yield
        finally:
            self.config.stash[CURRENT_ITEM] = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not (self.wanted and self.controller):
            return
        outcome = self.collected.tests.setdefault(
            report.nodeid, gate_document.Outcome(report.nodeid)
        )
        outcome.duration_s += report.duration
        if hasattr(report, "wasxfail"):
            outcome.outcome = "xfailed" if report.skipped else "xpassed"
        elif report.failed:
            outcome.outcome, outcome.reason = "failed", _message(report)
        elif report.skipped and outcome.outcome != "failed":
            outcome.outcome, outcome.reason = "skipped", _skip_reason(report)
        if report.when == "teardown":  # its properties hold everything the test recorded
            self._take_properties(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if self.wanted and self.controller and (report.failed or report.skipped):
            self.collected.tests[report.nodeid] = gate_document.Outcome(
                report.nodeid,
                "failed" if report.failed else "skipped",
                _message(report) if report.failed else _skip_reason(report),
            )

    def _take_properties(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == PARITY_PROPERTY:
                self.collected.parity.append(json.loads(str(value)))
            elif name == ACCURACY_PROPERTY:
                self.collected.accuracy.append(json.loads(str(value)))
            elif name == SERVER_PROPERTY:
                info = json.loads(str(value))
                self.collected.servers.setdefault(info["http"], info)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not (self.wanted and self.controller):
            return
        triton = self.triton
        directory = Path(triton.gate.report) if triton.gate.report else None
        runs, problems = (
            read_load_files(directory) if directory and directory.is_dir() else ([], [])
        )
        for run in runs:  # e.g. a locustfile run before pytest: fine, but say so
            run["before_session"] = run["written"] < self.started_wall
        document = gate_document.build_document(
            self.collected,
            environment=environment(),
            load_runs=runs,
            problems=problems,
            exit_status=int(exitstatus),
            duration_s=time.monotonic() - self.started,
            junit=getattr(self.config.option, "xmlpath", None),
        )
        if self.baseline is not None and triton.gate.baseline:
            limits = gate_baseline.Limits(
                triton.gate.baseline_throughput_drop,
                triton.gate.baseline_p99_rise,
                triton.gate.baseline_headroom,
            )
            document["baseline"] = gate_baseline.compare_with_baseline(
                document, self.baseline, limits, triton.gate.baseline
            )
        gate_document.decide(document)
        if directory is not None:
            self.written = write_report(
                document,
                directory,
                headroom_limit_pct=triton.gate.baseline_headroom if triton.gate.baseline else None,
                step_summary=os.environ.get("GITHUB_STEP_SUMMARY") or None,
            )
        if triton.gate.save_baseline:
            if document["verdict"]["passed"]:
                save_baseline(document, Path(triton.gate.save_baseline))
                self.notes.append(f"baseline saved to {triton.gate.save_baseline}")
            else:
                self.notes.append(
                    f"baseline NOT saved to {triton.gate.save_baseline}: the gate "
                    "failed, and a failed run must not become the reference"
                )
        self.document = document
        if not document["verdict"]["passed"] and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        document = self.document
        if document is None:
            return
        verdict = document["verdict"]
        write = terminalreporter.write_line
        terminalreporter.section(
            "pytest-triton gate",
            sep="=",
            bold=True,
            green=verdict["passed"],
            red=not verdict["passed"],
        )
        write(f"gate: {'PASS' if verdict['passed'] else 'FAIL'}")
        for reason in verdict["reasons"]:
            write(f"  - {reason}")
        baseline = document.get("baseline")
        if baseline:
            write(
                f"baseline {baseline['file']}: {len(baseline['comparisons'])} comparisons, "
                f"{len(baseline['regressions'])} regression(s)"
            )
            for regression in baseline["regressions"]:
                write(f"  REGRESSION {regression}")
        for path in self.written:
            write(f"report: {path}")
        for note in self.notes:
            write(note)


def _message(report: pytest.TestReport | pytest.CollectReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip().splitlines()[0][:500] if text.strip() else ""


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")
