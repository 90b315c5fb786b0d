"""pytest's terminal reporter where no public API answers: the private names step_report.py
writes its lines with, in one place (docs/architecture.md's compatibility table), checked by
tests/plugin/test_terminal_compat.py against the pinned pytest.

A step's lines are written at a line boundary pytest owns: a file's line of dots ends with the
` [ 30%]` pytest would write when the next file's line starts (`_show_progress_info`,
`_write_progress_information_filling_space`), and `currentfspath` tells pytest whether the
line it writes next starts a new file's line (None) or follows a line left open (-2, pytest's
own marker for that). Where a pytest lacks these names the steps wait for the end-of-run
summary, with one warning naming what is missing (never silently)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

FILL_PROGRESS = "_write_progress_information_filling_space"
SHOWS_PROGRESS = "_show_progress_info"
PRIVATE_NAMES = (FILL_PROGRESS, SHOWS_PROGRESS, "currentfspath")
LINE_LEFT_OPEN = -2  # pytest's value of currentfspath after a line it did not end


def missing(reporter: Any) -> list[str]:
    """The private names this reporter lacks (none on the pinned pytest)."""
    return [name for name in PRIVATE_NAMES if not hasattr(reporter, name)]


def usable(reporter: Any) -> bool:
    """Whether steps can be written between pytest's lines; warns once a reporter if not."""
    lacking = missing(reporter)
    if lacking and not getattr(reporter, "_pytest_triton_warned", False):
        reporter._pytest_triton_warned = True
        warnings.warn(
            pytest.PytestWarning(
                f"pytest {pytest.__version__}'s terminal reporter has no {', '.join(lacking)}: "
                "pytest-triton's set-up steps are shown in the summary at the end only"
            ),
            stacklevel=2,
        )
    return not lacking


def on_a_files_line(reporter: Any) -> bool:
    """A file's line of dots is open (pytest has written its name and not ended it)."""
    return reporter.currentfspath is not None


def end_a_files_line(reporter: Any) -> None:
    """The ` [ 30%]` that pytest writes at the end of a file's line of dots, written now."""
    if getattr(reporter, SHOWS_PROGRESS):
        getattr(reporter, FILL_PROGRESS)()


def leave_line_open(reporter: Any, verbose: bool) -> None:
    """After a step's line: -v's next test id starts on a line of its own; the default mode
    starts the next file's line anew."""
    reporter.currentfspath = LINE_LEFT_OPEN if verbose else None
