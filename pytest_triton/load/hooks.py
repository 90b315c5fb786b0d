"""pytest-triton's listeners on Locust's events, registered by `install(events)`.

`users` installs them on Locust's global events when a locustfile imports it; library use
(an Environment of its own) installs them on that environment's events, or not at all.
Listeners run in every Locust process; the master (or the single local process) makes the
LoadRun at init, workers only send load.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import Runner, WorkerRunner

from ..errors import ConfigError, TritonTestError
from . import recording, verdict
from .options import add_options
from .run import LoadRun, run_of

log = logging.getLogger("pytest_triton.load")
_installed: set[int] = set()


def install(events: Events) -> None:
    """Register the listeners once per Events object."""
    if id(events) in _installed:
        return
    _installed.add(id(events))
    events.init_command_line_parser.add_listener(add_options)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    events.cpu_warning.add_listener(_on_cpu_warning)
    events.quitting.add_listener(_on_quitting)


def _on_init(environment: Environment, runner: Runner | None = None, **_: Any) -> None:
    try:
        recording.attach(environment)
        if environment.parsed_options is None or isinstance(runner, WorkerRunner):
            return  # library use, or a worker: the master decides and sends its options
        run: LoadRun | None = None
        try:
            run = LoadRun.create(environment)
            # Locust's quit event names no environment: the run listens for its own.
            environment.events.quit.add_listener(functools.partial(_on_quit, run))
            run.prepare()
        except (TritonTestError, OSError) as exc:
            reason = "" if isinstance(exc, ConfigError) or run is None or run.server is None \
                else "the embedded server could not start: "
            _fatal(run, f"pytest-triton: {reason}{exc}")
    finally:
        _sync_loop_clock()


def _sync_loop_clock() -> None:
    """Bring the gevent loop's cached clock up to date before Locust arms its --run-time timer.

    libev measures a timer from the time of the loop's last iteration, and the loop does not
    iterate while a process imports torch or exports models: without this, `-t 4s` after a
    3-second start stops the run 1 s after it began (and Locust's CSV, written once a second,
    can miss every request).
    """
    gevent.get_hub().loop.update_now()


def _fatal(run: LoadRun | None, message: str, code: int = 2) -> None:
    """A configuration error before any load: one clear line, no traceback, nothing left."""
    log.error(message)
    if run is not None:
        run.stop_server()
    sys.exit(code)


def _on_test_start(environment: Environment, **_: Any) -> None:
    run = run_of(environment)
    if run is None:
        return
    try:
        run.start()
    except ConfigError as exc:
        log.error("pytest-triton: %s", exc)
        environment.process_exit_code = 2
        gevent.spawn(run.end, "the run's settings were refused")


def _on_test_stop(environment: Environment, **_: Any) -> None:
    run = run_of(environment)
    if run is not None:
        run.finish()


def _on_cpu_warning(environment: Environment, **_: Any) -> None:
    run = run_of(environment)
    if run is not None:
        run.cpu_warning = True


def _on_quitting(environment: Environment, **_: Any) -> None:
    run = run_of(environment)
    if run is None:
        return
    if not run.started:
        run.summary = "pytest-triton: no test ran, nothing to judge"
        return
    verdict.judge(run)


def _on_quit(run: LoadRun, exit_code: int, **_: Any) -> None:
    """After Locust's own tables: the server report and the verdict, then stop the server."""
    try:
        verdict.report(run, exit_code)
    finally:
        run.close()
