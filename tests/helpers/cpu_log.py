"""Where the suite's CPU goes, test by test: on when PYTEST_TRITON_CPU_LOG names a file.

The suite's wall time on a 2-core machine is its CPU divided by two, plus the time both
workers wait at once; to make it shorter one must know which tests spend the CPU. Each xdist
worker (or a session without xdist) appends one JSON line a test: its node id, its wall
seconds and the CPU seconds its worker spent on it, counted as the worker's own CPU plus its
reaped children's (servers, stubs, cold subprocesses: the kernel adds a child's CPU to its
parent's when the parent reaps it) plus the same of this worker's warm interpreters (the
processes warm_start.py forks). A server a module shares is counted in the test after which
it stops. A python stub outlives its server by a moment at every stop, so its CPU would go to
no one (an orphan is reaped by init); each logging process makes itself their child subreaper
and reaps the stubs it adopts. The controller adds a first and a last line with the
machine's busy and idle CPU, so the sum of the tests can be held against the whole (docker's
containers, a process no test reaps and the kernel's own work are in the whole only).

Only the suite's own session logs: a pytest session a test starts (pytester, the examples'
sessions) inherits the variable but is not a child of the suite's controller, and stays
silent. `python benchmarks/suite_cpu.py LOG` prints the tables (docs/development.md).
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from typing import Any

import psutil
import pytest

from tests.helpers import warm_start

LOG = "PYTEST_TRITON_CPU_LOG"
_CONTROLLER = "PYTEST_TRITON_CPU_LOG_CONTROLLER"  # the suite's controller's pid


def process_cpu_s(pid: int) -> float:
    """A process's CPU seconds with its reaped children's; 0 for one that is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system + times.children_user + times.children_system


def machine_cpu_s() -> tuple[float, float]:
    """The machine's (busy, idle) CPU seconds since boot, all cores summed (guest time is
    part of user time already)."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + t.irq + t.softirq + t.steal
    return busy, t.idle + t.iowait


def worker_cpu_s() -> float:
    """This worker's CPU, with its children's and its warm interpreters' (see module doc)."""
    return process_cpu_s(os.getpid()) + sum(
        process_cpu_s(warm.proc.pid) for warm in warm_start.warm_interpreters()
    )


PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
ADOPTED = "triton_python_b"  # the stub's name as the kernel keeps it (15 characters)


def adopt_orphans() -> None:
    """Orphaned descendants of this process are re-parented to it rather than to init."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_adopted() -> None:
    """Reap the stubs that exited as this process's adopted children: their CPU joins this
    process's children's. Only stubs: a zombie a test's Popen owns stays for its wait()."""
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE and child.name().startswith(ADOPTED):
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            continue


def enabled(config: pytest.Config) -> bool:
    """Whether this session is the suite's own (its controller, or a worker it started)."""
    if not os.environ.get(LOG):
        return False
    if hasattr(config, "workerinput"):
        return os.environ.get(_CONTROLLER) == str(os.getppid())
    controller = os.environ.get(_CONTROLLER)
    return controller is None or controller == str(os.getpid())


def _append(record: dict[str, Any]) -> None:
    with open(os.environ[LOG], "a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")


class CpuLog:
    """The plugin: a line per test from each worker, the machine's totals from the
    controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.worker = str(getattr(config, "workerinput", {}).get("workerid", "main"))
        self.controller = not hasattr(config, "workerinput")
        self.started: dict[str, tuple[float, float]] = {}
        if self.controller:
            os.environ[_CONTROLLER] = str(os.getpid())
        adopt_orphans()

    def _machine(self, event: str) -> None:
        busy, idle = machine_cpu_s()
        _append({"event": event, "time": time.time(), "busy_s": busy, "idle_s": idle})

    def pytest_sessionstart(self) -> None:
        if self.controller:
            self._machine("start")

    def pytest_sessionfinish(self) -> None:
        if self.controller:
            self._machine("finish")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        self.started[item.nodeid] = (worker_cpu_s(), time.monotonic())

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if nodeid not in self.started:  # the controller hears its workers' tests too
            return
        cpu, wall = self.started.pop(nodeid)
        reap_adopted()
        _append(
            {
                "test": nodeid,
                "worker": self.worker,
                "wall_s": round(time.monotonic() - wall, 3),
                "cpu_s": round(worker_cpu_s() - cpu, 3),
            }
        )


def register(config: pytest.Config) -> None:
    """Called from tests/conftest.py's pytest_configure."""
    if enabled(config):
        config.pluginmanager.register(CpuLog(config), "pytest-triton-cpu-log")
