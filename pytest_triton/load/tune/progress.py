"""How triton-tune shows its progress: on a terminal, a tqdm bar over the candidates with the
time spent and the ETA (the results print above it); elsewhere (CI logs, pipes) one line per
candidate, so that a log keeps every result and its ETA without carriage returns."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from pytest_triton.load.tune.strategy import Search, Trial
from pytest_triton.load.tune.tables import describe

BAR_FORMAT = (
    "{desc}: {percentage:3.0f}%|{bar:24}| {n_fmt}/{total_fmt} candidates [{elapsed}{postfix}]"
)


def clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def eta_text(search: Search) -> str:
    """The ETA from the mean time per candidate, capped by the budget; the quick search's is
    an upper bound for its current pass (its length is known one pass at a time)."""
    bound = "<= " if search.mode == "quick" else ""
    return f"ETA {bound}{clock(search.budget.eta(search.remaining))}"


def progress_line(trial: Trial, search: Search, unit: str) -> str:
    """The line of one candidate in a log: how many were tried, time spent, ETA, result."""
    done = len(search.trials)
    if search.mode == "exhaustive":
        count = f"candidate {done}/{done + search.remaining}"
    else:
        count = f"candidate {done} (pass: <= {search.remaining} more)"
    return (
        f"{count}, {clock(search.budget.elapsed)} elapsed, {eta_text(search)} | "
        f"{describe(trial, unit)} ({trial.seconds:.1f} s)"
    )


class Progress:
    """Messages and per-candidate progress of one search: `bar` True draws the tqdm bar on
    `file` (stderr by default) and prints messages above it; False prints lines through
    `say`. None: a bar when stderr is a terminal. `total`: the candidates expected so far."""

    def __init__(
        self,
        say: Callable[[str], None],
        bar: bool | None = None,
        file: TextIO | None = None,
        total: int = 1,
    ) -> None:
        self.say = say
        self.file = file or sys.stderr
        if bar is None:
            bar = self.file.isatty()
        self._bar: Any = None
        if bar:
            from tqdm import tqdm  # the `load` extra

            self._tqdm = tqdm
            size = shutil.get_terminal_size()  # $COLUMNS/$LINES, the terminal's, else 80x24
            self._bar = tqdm(
                total=total,
                desc="triton-tune",
                file=self.file,
                bar_format=BAR_FORMAT,
                # a terminal that reports no size (a pty without one, as `script` or
                # `docker run -t` give) would get no bar from tqdm's own measure
                ncols=size.columns,
                nrows=size.lines,
                leave=True,
            )

    @property
    def drawing(self) -> bool:
        return self._bar is not None

    @contextmanager
    def _above_bar(self) -> Iterator[None]:
        if self._bar is None:
            yield
        else:
            with self._tqdm.external_write_mode(file=self.file):
                yield

    def message(self, text: str) -> None:
        with self._above_bar():
            self.say(text)

    def candidate(self, trial: Trial, search: Search, unit: str) -> None:
        """One more candidate tried: its line, or its result above the moved bar."""
        if self._bar is None:
            self.say(progress_line(trial, search, unit))
            return
        self.message(f"{describe(trial, unit)} ({trial.seconds:.1f} s)")
        done = len(search.trials)
        self._bar.total = min(done + search.remaining, max(done, search.space.size()))
        self._bar.n = done
        self._bar.set_postfix_str(eta_text(search), refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.total = self._bar.n  # done: a quick search's last pass ended early
            self._bar.set_postfix_str("done", refresh=False)
            self._bar.refresh()
            self._bar.close()
            self._bar = None
