"""The web UI's listeners on Locust's events: the Triton tab once the run exists, a live view
per test from its start to its verdict. Installed after load/runner/listeners.py's, so each
fires after the run's own listener for the same event (the run exists, the verdict is in)."""

from __future__ import annotations

import functools
from typing import Any

from locust.env import Environment
from locust.event import Events

from pytest_triton.load.runner.listeners import install_once
from pytest_triton.load.runner.run import run_of
from pytest_triton.load.webui import live, tab


def install_web_listeners(events: Events) -> None:
    """Register the web UI's listeners once per Events object."""
    install_once(
        events,
        "webui",
        {
            "init": _on_init,
            "test_start": _on_test_start,
            "test_stop": _on_test_stop,
            "quitting": _on_quitting,
        },
    )


def _on_init(environment: Environment, **_: Any) -> None:
    if run_of(environment) is None:
        return  # library use, a worker, or a run that could not be made
    tab.install_web_tab(environment)
    environment.events.reset_stats.add_listener(functools.partial(_on_reset_stats, environment))


def _on_test_start(environment: Environment, **_: Any) -> None:
    run = run_of(environment)
    if run is not None and not run.refused:
        live.start(environment)


def _on_test_stop(environment: Environment, **_: Any) -> None:
    view = live.live_of(environment)
    if view is not None:
        view.finish()


def _on_reset_stats(environment: Environment, **_: Any) -> None:
    """Locust's statistics start over (the web UI's reset): so does the live view."""
    view = live.live_of(environment)
    if view is not None:
        view.reset()


def _on_quitting(environment: Environment, **_: Any) -> None:
    view = live.live_of(environment)
    if view is not None:
        view.close()
