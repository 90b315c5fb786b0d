"""Debian's headless Chromium as the tests' browser: load a page, let its scripts run, and
hand back the rendered DOM (or a screenshot).

`--virtual-time-budget` lets the page's timers and fetches run for that much page time before
the DOM is dumped, so a React UI that polls its server has rendered by then. Each call uses a
fresh profile and its own process group, killed on timeout: no browser outlives a test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")
INSTALL = (
    "headless Chromium is part of this project's test set-up and was not found on PATH "
    "(looked for: " + ", ".join(NAMES) + "). Install it: `apt-get install -y chromium` "
    "on Debian/Ubuntu (`make chromium` does it; CI's .ci/run does it before `make test`)."
)
# Known to work here as root and on a closed network (without the networking flags Chromium's
# own background connections fail and can stall the page).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def chromium() -> str:
    """The browser's path; the test fails (not skips) without one: it is part of the set-up."""
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(INSTALL, pytrace=False)


def render(
    url: str,
    *,
    budget_ms: int = 6000,
    screenshot: Path | None = None,
    window: tuple[int, int] = (1400, 1000),
    timeout_s: float = 90,
) -> str:
    """The DOM of `url` after `budget_ms` of page time (or "" when taking a screenshot)."""
    browser = chromium()
    with tempfile.TemporaryDirectory(prefix="pytest-triton-chromium-") as profile:
        action = (
            [f"--screenshot={screenshot}", f"--window-size={window[0]},{window[1]}"]
            if screenshot
            else ["--dump-dom"]
        )
        cmd = [
            browser,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            *action,
            url,
        ]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            out, err = "", ""
            pytest.fail(f"Chromium did not render {url} within {timeout_s:.0f}s", pytrace=False)
        finally:
            with contextlib.suppress(ProcessLookupError):  # its renderers share the group
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    rendered = screenshot.exists() if screenshot is not None else bool(out.strip())
    if proc.returncode != 0 or not rendered:
        problems = [line for line in err.splitlines() if "dbus" not in line.lower()]
        pytest.fail(
            f"Chromium could not render {url} (exit {proc.returncode}):\n"
            + "\n".join(problems[-15:]),
            pytrace=False,
        )
    return out


class _Tables(HTMLParser):
    """Every table row's cell texts, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th") and self.rows:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def table_rows(html: str) -> list[list[str]]:
    parser = _Tables()
    parser.feed(html)
    return [r for r in parser.rows if r]
