"""The suite's CPU log (tests/helpers/cpu_log.py, benchmarks/suite_cpu.py): a test's line
holds the CPU its process and its reaped children spent, not the time it waited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.suite_cpu import by_file, machine_lines, read
from tests.helpers import cpu_log

CONFTEST = """
from tests.helpers import cpu_log


def pytest_configure(config):
    cpu_log.register(config)
"""
TESTS = """
import subprocess, sys, time

SPIN = "import time\\nend = time.process_time() + 0.4\\nwhile time.process_time() < end: pass"


def test_spends():
    exec(SPIN)
    subprocess.run([sys.executable, "-c", SPIN], check=True)


def test_waits():
    time.sleep(0.5)
"""


def test_a_line_per_test_with_its_own_and_its_childrens_cpu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "cpu.jsonl"
    monkeypatch.setenv(cpu_log.LOG, str(log))
    monkeypatch.delenv("PYTEST_TRITON_CPU_LOG_CONTROLLER", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_spending=TESTS)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
    tests, machine = read(log)
    spent = {r["test"].split("::")[1]: r for r in tests}
    assert set(spent) == {"test_spends", "test_waits"}, tests
    # 0.4 s here and 0.4 s in a child the test reaped, plus the child interpreter's start
    assert spent["test_spends"]["cpu_s"] >= 0.75, spent
    assert spent["test_waits"]["wall_s"] >= 0.5 and spent["test_waits"]["cpu_s"] < 0.25, spent
    assert set(machine) == {"start", "finish"}
    assert by_file(tests)["test_spending.py"].tests == 2
    total = sum(r["cpu_s"] for r in tests)
    assert "idle" in machine_lines(machine, total)[0]
    assert json.loads(log.read_text().splitlines()[0])["event"] == "start"


def test_only_the_suites_own_session_logs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session a test starts inherits the variable, not the controller's pid."""
    monkeypatch.setenv(cpu_log.LOG, "unused")
    monkeypatch.setenv("PYTEST_TRITON_CPU_LOG_CONTROLLER", "1")  # another process
    assert not cpu_log.enabled(pytester.parseconfig())
    monkeypatch.delenv(cpu_log.LOG)
    assert not cpu_log.enabled(pytester.parseconfig())
