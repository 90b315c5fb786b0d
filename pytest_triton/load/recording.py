"""Each Locust process logs its requests into a WindowLog; workers send theirs to the master
with every statistics report (Locust's report_to_master / worker_report events), so the
master can cut the whole run into measurement windows."""

from __future__ import annotations

import functools
import time
from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from .arrivals import Lag
from .window_log import WindowLog

ATTRIBUTE = "pytest_triton_window_log"
LAG_ATTRIBUTE = "pytest_triton_schedule_lag"
REPORT_KEY = "pytest_triton_windows"


def window_log(environment: Environment) -> WindowLog | None:
    return getattr(environment, ATTRIBUTE, None)


def schedule_lag(environment: Environment, user_rate: float | None = None) -> Lag | None:
    """This process's open-loop lag (made by its first open-loop user, at its rate)."""
    lag: Lag | None = getattr(environment, LAG_ATTRIBUTE, None)
    if lag is None and user_rate is not None:
        lag = Lag(user_rate)
        setattr(environment, LAG_ATTRIBUTE, lag)
    return lag


def attach(environment: Environment) -> WindowLog:
    """Start logging this process's requests (once per environment)."""
    log = window_log(environment)
    if log is not None:
        return log
    log = WindowLog()
    setattr(environment, ATTRIBUTE, log)
    events = environment.events
    events.request.add_listener(functools.partial(_record, log))
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        events.report_to_master.add_listener(functools.partial(_send, log))
    elif isinstance(runner, MasterRunner):
        events.worker_report.add_listener(functools.partial(_receive, log))
    return log


def _record(log: WindowLog, response_time: float, exception: Exception | None = None,
            context: dict[str, Any] | None = None, **_: Any) -> None:
    samples = int((context or {}).get("batch_size", 1))
    log.record(time.time(), float(response_time), exception is None, samples)


def _send(log: WindowLog, client_id: str, data: dict[str, Any], **_: Any) -> None:
    data[REPORT_KEY] = log.take_unsent()


def _receive(log: WindowLog, client_id: str, data: dict[str, Any], **_: Any) -> None:
    report = data.get(REPORT_KEY)
    if report:
        log.merge(report)
