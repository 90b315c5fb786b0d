"""Each Locust process logs its requests into a WindowLog; workers send theirs to the master
with every statistics report (Locust's report_to_master / worker_report events), so the
master holds the whole run: its measurement windows and its samples (each request event
carries its batch size in `context["batch_size"]`; its `response_length` is bytes). The log
starts over when Locust's statistics do (test start, reset)."""

from __future__ import annotations

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from pytest_triton.load.measure.arrivals import Lag
from pytest_triton.load.measure.window_log import WindowLog
from pytest_triton.load.runner.run_state import StateKey, run_state

WINDOW_LOG = StateKey[WindowLog]("window log")
LAG = StateKey[Lag]("schedule lag")


def window_log(environment: Environment) -> WindowLog | None:
    return run_state(environment).get(WINDOW_LOG)


def schedule_lag(environment: Environment, user_rate: float | None = None) -> Lag | None:
    """This process's open-loop lag (made by its first open-loop user, at its rate)."""
    lag = run_state(environment).get(LAG)
    if lag is None and user_rate is not None:
        lag = Lag(user_rate)
        run_state(environment)[LAG] = lag
    return lag


def attach_window_log(environment: Environment) -> WindowLog:
    """Start logging this process's requests (once per environment)."""
    log = window_log(environment)
    if log is not None:
        return log
    log = WindowLog()
    run_state(environment)[WINDOW_LOG] = log
    events = environment.events
    events.request.add_listener(log.on_request)
    events.test_start.add_listener(lambda **_: log.clear())
    events.reset_stats.add_listener(lambda **_: log.clear())
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        events.report_to_master.add_listener(log.on_report_to_master)
    elif isinstance(runner, MasterRunner):
        events.worker_report.add_listener(log.on_worker_report)
    return log
