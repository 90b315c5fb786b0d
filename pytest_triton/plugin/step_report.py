"""What long fixture steps did (exports, server starts, load runs), shown where it does not break
pytest's own progress lines.

Writing to the terminal while a fixture sets up lands in the middle of a test's line: `-v`
then prints the test id twice and the default mode repeats the file's name for each message.
So steps are logged (logger `pytest_triton.progress`, visible live with `--log-cli-level=INFO`
and in a failed test's "Captured log"), kept on the test's report (`report.triton_steps`,
which xdist carries from its workers) and shown by the process that owns the terminal only at
a line boundary: `-v` after the test's result line, the default mode after a file's line of
dots, `-q` (one line of dots for the whole run) in a summary section at the end.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Generator
from typing import Any

import pytest

from pytest_triton.base.setup_steps import LOGGER, log, say
from pytest_triton.plugin import terminal_compat

ATTRIBUTE = "triton_steps"
PREFIX = "[pytest-triton] "
SLOW_S = 5.0  # the -q summary lists steps at least this long (and counts the rest)
LONGEST = 30  # at most this many of them, longest first (as --durations=30 does)
_DURATION = re.compile(r" in (\d+(?:\.\d+)?)s\b")

__all__ = ["LOGGER", "Progress", "register", "say", "seconds", "shown", "unregister"]


def seconds(message: str) -> float | None:
    """The duration a step's message states (" in 3.1s"), if any."""
    found = _DURATION.search(message)
    return float(found.group(1)) if found else None


def shown(message: str) -> bool:
    """Finished steps are shown; "exporting x ..." lines only help where a test fails."""
    return not message.rstrip().endswith("...")


class _Collector:
    """The steps of the current test phase, of one session."""

    def __init__(self) -> None:
        self.pending: list[str] = []


class _Handler(logging.Handler):
    """Hands each step to the innermost session: a session run inside a test (pytester's
    in-process runs) keeps its steps from the outer test's report."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.sessions: list[_Collector] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.sessions:
            self.sessions[-1].pending.append(record.getMessage())


_HANDLER = _Handler()


class Progress:
    """The pytest plugin: collects steps per test phase and shows them at line boundaries."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.collector = _Collector()
        self.waiting: list[str] = []  # steps not yet shown
        self.steps: list[tuple[str, str]] = []  # (test id, step) of the whole run
        self.path: str | None = None  # the file of the default mode's current line
        self._old_level = log.level

    def start(self) -> None:
        if not _HANDLER.sessions:
            log.addHandler(_HANDLER)
        _HANDLER.sessions.append(self.collector)
        if log.getEffectiveLevel() > logging.INFO:
            log.setLevel(logging.INFO)

    def stop(self) -> None:
        if self.collector in _HANDLER.sessions:
            _HANDLER.sessions.remove(self.collector)
        if not _HANDLER.sessions:
            log.removeHandler(_HANDLER)
            log.setLevel(self._old_level)

    @property
    def _reporter(self) -> Any:
        if hasattr(self.config, "workerinput"):  # an xdist worker: its controller shows them
            return None
        return self.config.pluginmanager.get_plugin("terminalreporter")

    @property
    def _verbosity(self) -> int:
        return int(self.config.get_verbosity())

    # -- every process: the steps of a phase go on its report ---------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if self.collector.pending:
            setattr(report, ATTRIBUTE, list(self.collector.pending))
            self.collector.pending.clear()
        return report

    # -- the process with the terminal ----------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for step in getattr(report, ATTRIBUTE, None) or []:
            self.steps.append((report.nodeid, step))
            if shown(step):
                self.waiting.append(step)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        """Default mode: a new file's line starts here; the last file's steps go first."""
        path = location[0]
        if self._verbosity == 0 and path != self.path:
            if self.path is not None:
                self._flush(finish_dots=True)
            self.path = path

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self) -> None:
        """-v: the test's result line is complete."""
        if self._verbosity > 0:
            self._flush()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtestloop(self) -> Generator[None, object, object]:
        result = yield
        if self._verbosity == 0:  # after the last file's line and its [100%]
            self._flush()
        return result

    def _flush(self, finish_dots: bool = False) -> None:
        reporter = self._reporter
        if not self.waiting or reporter is None:
            return
        if self._verbosity <= 0 and not reporter.showfspath:
            return  # -q and xdist's default mode: one line of dots, no file lines
        if not terminal_compat.usable(reporter):
            return  # the summary lists them (terminal_compat warned)
        if finish_dots and terminal_compat.on_a_files_line(reporter):
            # the [ 30%] pytest writes when the next file's line starts; it would then land
            # on the last step's line
            terminal_compat.end_a_files_line(reporter)
        reporter.ensure_newline()
        reporter.write("\n".join(f"    {PREFIX}{step}" for step in self.waiting), flush=True)
        self.waiting.clear()
        # The last step's line is left open: pytest ends it when its next line starts (the
        # next file, or the summary)
        terminal_compat.leave_line_open(reporter, verbose=self._verbosity > 0)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """-q and xdist without -v showed no step on the way: the longest, here (no section
        where none was long: a count of steps it does not list tells nothing)."""
        slow = sorted(
            ((test, step) for test, step in self.steps if (seconds(step) or 0) >= SLOW_S),
            key=lambda pair: -(seconds(pair[1]) or 0),
        )[:LONGEST]
        if not self.waiting or not slow:
            self.waiting.clear()
            return
        terminalreporter.section("pytest-triton: long set-up steps", sep="-")
        for test, step in slow:
            terminalreporter.write_line(f"{step}  ({test})")
        rest = len(self.waiting) - len(slow)
        if rest > 0:
            terminalreporter.write_line(
                f"... and {rest} more step(s); -v shows each after its test"
            )
        self.waiting.clear()


KEY = pytest.StashKey[Progress]()


def register(config: pytest.Config) -> None:
    """Installed by the plugin's pytest_configure; undone by `unregister`."""
    progress = Progress(config)
    progress.start()
    config.stash[KEY] = progress
    config.pluginmanager.register(progress, "pytest-triton-progress")


def unregister(config: pytest.Config) -> None:
    progress = config.stash.get(KEY, None)
    if progress is not None:
        progress.stop()
        config.pluginmanager.unregister(progress)
        del config.stash[KEY]
