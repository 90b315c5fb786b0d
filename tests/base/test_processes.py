"""Ctrl-C during a server's cleanup: the cleanup finishes, then the interrupt acts (the race
that left a work directory and a shared-memory region behind a SIGINT at the wrong moment of
test_interrupted_sessions.py). Run in a process of its own: the signal is real."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.locust_runs import REPO

PROBE = """
import json, signal, threading
from pytest_triton.base.processes import interrupts_deferred

# Python's own start where SIGINT is not ignored: a shell's background job (a suite started
# with `make test &`) inherits it ignored, and the probe then saw no interrupt at all
signal.signal(signal.SIGINT, signal.default_int_handler)
seen = []
try:
    with interrupts_deferred():
        signal.raise_signal(signal.SIGINT)
        seen.append("cleanup finished")
except KeyboardInterrupt:
    seen.append("then interrupted")
handler_back = signal.getsignal(signal.SIGINT) is signal.default_int_handler


def elsewhere():
    with interrupts_deferred():  # no signal reaches a thread: nothing to defer
        seen.append("thread ran")


thread = threading.Thread(target=elsewhere)
thread.start()
thread.join()
print(json.dumps({"seen": seen, "handler back": handler_back}))
"""


def test_ctrl_c_waits_for_the_cleanup_then_interrupts() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "seen": ["cleanup finished", "then interrupted", "thread ran"],
        "handler back": True,
    }
