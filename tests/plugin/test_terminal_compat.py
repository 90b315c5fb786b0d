"""The contract of plugin/terminal_compat.py with pytest's terminal reporter: the private
names step_report.py writes its lines with exist on the pinned pytest and mean what it
assumes; an upgrade that changes them fails here, not as garbled output."""

from __future__ import annotations

import inspect
import io
import types

import pytest
from _pytest.terminal import TerminalReporter

from pytest_triton.plugin import terminal_compat


def _reporter(pytester: pytest.Pytester) -> TerminalReporter:
    return TerminalReporter(pytester.parseconfig(), io.StringIO())


def test_pytests_reporter_has_the_private_names(pytester: pytest.Pytester) -> None:
    reporter = _reporter(pytester)
    assert terminal_compat.missing(reporter) == []
    assert callable(getattr(reporter, terminal_compat.FILL_PROGRESS))
    assert getattr(reporter, terminal_compat.SHOWS_PROGRESS) == "progress"  # the default
    assert reporter.currentfspath is None  # no file's line open before the first test


def test_pytest_marks_a_line_it_did_not_end_as_step_report_does() -> None:
    """-2 is pytest's own value of currentfspath after writing a line it leaves open."""
    source = inspect.getsource(TerminalReporter)
    assert f"self.currentfspath = {terminal_compat.LINE_LEFT_OPEN}" in source
    fill = inspect.getsource(getattr(TerminalReporter, terminal_compat.FILL_PROGRESS))
    assert "_get_progress_information_message" in fill and "rjust" in fill


def test_writing_the_progress_ends_the_files_line(pytester: pytest.Pytester) -> None:
    """The ` [100%]` pytest writes at the end of a file's line, written when asked."""
    out = io.StringIO()
    reporter = TerminalReporter(pytester.parseconfig(), out)
    reporter._session = types.SimpleNamespace(testscollected=2)  # type: ignore[assignment]
    reporter._progress_nodeids_reported = {"a", "b"}
    reporter.write("test_a.py ..")
    terminal_compat.end_a_files_line(reporter)
    assert out.getvalue().rstrip().endswith("[100%]"), out.getvalue()


def test_a_reporter_without_them_is_named_once_not_silently_skipped() -> None:
    bare = types.SimpleNamespace(currentfspath=None)
    with pytest.warns(pytest.PytestWarning, match="_write_progress_information_filling_space"):
        assert not terminal_compat.usable(bare)
    assert not terminal_compat.usable(bare)  # warned once
