"""pytest-triton's listeners on Locust's events, registered by `install(events)`.

`users` installs them on Locust's global events when a locustfile imports it; library use
(an Environment of its own) installs them on that environment's events, or not at all.
Listeners run in every Locust process: each counts the samples of its requests and measures
its CPU (workers hand both to the master); the master (or the single local process) makes
the LoadRun at init, adds the Triton tab to the web UI and keeps the live view of a run;
workers only send load.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import Runner, WorkerRunner

from pytest_triton.base.errors import ConfigError, TritonTestError
from pytest_triton.load.runner import (
    agreement,
    distributed,
    generator_cpu,
    recording,
    rollout,
    shapes,
    stream_recording,
    verdict,
)
from pytest_triton.load.runner.options import add_options, web_ui_exposure
from pytest_triton.load.runner.run import LoadRun, run_of

log = logging.getLogger("pytest_triton.load")
_installed: set[tuple[int, str]] = set()


def install_once(events: Events, owner: str, listeners: Mapping[str, Callable[..., Any]]) -> None:
    """Add `listeners` (Locust event name -> listener) to `events`, once per Events object
    and owner: every locustfile and user module may ask, the first one installs."""
    if (id(events), owner) in _installed:
        return
    _installed.add((id(events), owner))
    for name, listener in listeners.items():
        getattr(events, name).add_listener(listener)


def install_listeners(events: Events) -> None:
    """Register the run's listeners once per Events object."""
    install_once(
        events,
        "run",
        {
            "init_command_line_parser": add_options,
            "init": _on_init,
            "test_start": _on_test_start,
            "test_stop": _on_test_stop,
            "cpu_warning": _on_cpu_warning,
            "quitting": _on_quitting,
        },
    )


def _on_init(environment: Environment, runner: Runner | None = None, **_: Any) -> None:
    try:
        if environment.parsed_options is None:
            return  # library use
        recording.attach_window_log(environment)
        stream_recording.attach_stream_log(environment)
        shapes.attach_shape_clock(environment)
        distributed.install_distributed(environment)
        rollout.listen_for_retirement(environment)
        generator_cpu.attach_cpu_watch(environment)
        agreement.attach_agreement_tally(environment)
        if isinstance(runner, WorkerRunner):
            return  # a worker: the master decides and sends its options
        _warn_if_exposed(environment)
        run: LoadRun | None = None
        try:
            run = LoadRun.create(environment)
            # Locust's quit and reset_stats events name no environment: listen for our own.
            environment.events.quit.add_listener(functools.partial(_on_quit, run))
            environment.events.reset_stats.add_listener(
                functools.partial(_on_reset_stats, environment)
            )
            run.prepare()
        except (TritonTestError, OSError) as exc:
            reason = (
                ""
                if isinstance(exc, ConfigError) or run is None or run.server is None
                else "the embedded server could not start: "
            )
            _fatal(run, f"pytest-triton: {reason}{exc}")
    finally:
        _sync_loop_clock()


def _warn_if_exposed(environment: Environment) -> None:
    options = environment.parsed_options
    if options is None or options.headless or getattr(options, "worker", False):
        return
    exposure = web_ui_exposure(options.web_host, options.web_login)
    if exposure:
        log.warning("pytest-triton: %s", exposure)


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
        run.refused, run.refusal = True, str(exc)
        gevent.spawn(run.end, "the run's settings were refused")


def _on_test_stop(environment: Environment, **_: Any) -> None:
    run = run_of(environment)
    if run is not None:
        run.finish()


def _on_reset_stats(environment: Environment, **_: Any) -> None:
    """Locust's statistics start over (the web UI's reset): so do the server's and ours."""
    run = run_of(environment)
    if run is not None and run.tracker is not None and run.started and not run.finished:
        run.tracker.start()


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
    verdict.judge_run(run)


def _on_quit(run: LoadRun, exit_code: int, **_: Any) -> None:
    """After Locust's own tables: the server report and the verdict, then stop the server."""
    try:
        verdict.report(run, exit_code)
    finally:
        run.close()
