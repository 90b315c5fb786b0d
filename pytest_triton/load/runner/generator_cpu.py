"""The load generator's CPU while a run goes on, for the saturation warning.

Locust's workers send their CPU with their heartbeats, measured every 10 s and zero until the
second measurement: a 20-second run would look idle. Here each worker measures its own CPU at
each stats report (every ~3 s, Locust's `report_to_master` event) and the master keeps the
latest per worker; a single process measures itself when asked. No locust import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psutil

from pytest_triton.load.runner.run_state import StateKey, run_state

REPORT_KEY = "pytest_triton_cpu"


class GeneratorCpu:
    """This process's CPU between two calls, and the workers' latest (on a master)."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._process.cpu_percent()  # psutil's first reading is the baseline
        self.workers: dict[str, float] = {}

    def own(self) -> float:
        """Percent of one core used since the previous call."""
        return float(self._process.cpu_percent())

    def busiest_worker(self) -> float | None:
        return max(self.workers.values()) if self.workers else None

    def reset(self, **_: Any) -> None:
        self.workers.clear()

    def on_report_to_master(self, data: dict[str, Any], **_: Any) -> None:
        data[REPORT_KEY] = self.own()

    def on_worker_report(self, client_id: str, data: Mapping[str, Any], **_: Any) -> None:
        if REPORT_KEY in data:
            self.workers[client_id] = float(data[REPORT_KEY])


def attach_cpu_watch(environment: Any) -> GeneratorCpu:
    cpu = cpu_of(environment)
    if cpu is None:
        cpu = GeneratorCpu()
        run_state(environment)[CPU] = cpu
        events = environment.events
        events.report_to_master.add_listener(cpu.on_report_to_master)
        events.worker_report.add_listener(cpu.on_worker_report)
        events.test_start.add_listener(cpu.reset)
    return cpu


def cpu_of(environment: Any) -> GeneratorCpu | None:
    return run_state(environment).get(CPU)


CPU = StateKey[GeneratorCpu]("generator CPU")
