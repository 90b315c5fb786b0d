"""The settings of a Locust run: its options (flags, env vars, web UI form) from the one
settings table, the locustfile's own default targets, and the run's resolved config.

No locust import here: the functions take Locust's parser and environment as arguments.
"""

from __future__ import annotations

import sys
from typing import Any

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.setting_sources import (
    add_arguments,
    from_arguments,
    from_mapping,
    join_dash_values,
)
from pytest_triton.base.urls import is_loopback_host
from pytest_triton.load.measure.targets import Targets
from pytest_triton.load.runner.run_state import StateKey, run_state

CONFIG = StateKey[TritonConfig]("attached config")
WEB_HOST = "127.0.0.1"  # Locust's own default is every interface
_locustfile_targets: dict[str, float | None] = {}


def default_targets(**limits: float | None) -> None:
    """A locustfile's own targets; --perf-* flags and TRITON_PERF_* variables override them.

    The table's default is perf_fail_ratio=0 (no failed request allowed).
    """
    Targets(**limits)  # a bad name or value fails at import of the locustfile
    _locustfile_targets.update(limits)


def add_options(parser: Any) -> None:
    """Locust's init_command_line_parser listener: our settings, and a web UI on loopback
    unless --web-host (or LOCUST_WEB_HOST, or a config file) says otherwise."""
    add_arguments(parser, "locust", env_vars=True)
    parser.set_defaults(web_host=WEB_HOST)
    # Locust parses sys.argv right after this event: a --triton-server-args value that
    # begins with '--' is joined to its flag first
    sys.argv[1:] = join_dash_values(sys.argv[1:])


def web_ui_exposure(web_host: str | None, web_login: bool) -> str | None:
    """Why the web UI can be driven from other machines, or None when it cannot: anyone who
    reaches it can start, stop and re-aim the load."""
    if web_login:
        return None
    host = (web_host or "").strip()
    if host and host != "*" and is_loopback_host(host):
        return None
    where = host if host and host != "*" else "every interface"
    return (
        f"the web UI listens on {where} without --web-login: anyone who can reach this "
        "machine can start, stop and re-aim the load. Pass --web-login, or leave out "
        f"--web-host (pytest-triton's default is {WEB_HOST})."
    )


def attach_config(environment: Any, config: TritonConfig) -> None:
    """Library use (triton-perf's generator): the config its users run with."""
    run_state(environment)[CONFIG] = config


def run_config(environment: Any) -> TritonConfig:
    """The run's settings: Locust's parsed options (the master's, on a worker) over the
    locustfile's default targets over the table's defaults."""
    attached = run_state(environment).get(CONFIG)
    if attached is not None:
        return attached
    sources = [from_mapping(_locustfile_targets, "locustfile default_targets()")]
    if environment.parsed_options is not None:
        sources.insert(0, from_arguments(environment.parsed_options, "locust"))
    return resolve(*sources)
