"""The settings of a Locust run: its options (flags, env vars, web UI form) from the one
settings table, the locustfile's own default targets, and the run's resolved config.

No locust import here: the functions take Locust's parser and environment as arguments.
"""

from __future__ import annotations

from typing import Any

from ..config import TritonConfig, add_arguments, from_arguments, from_mapping, resolve
from .targets import Targets

CONFIG_ATTRIBUTE = "pytest_triton_config"
_locustfile_targets: dict[str, float | None] = {}


def default_targets(**limits: float | None) -> None:
    """A locustfile's own targets; --perf-* flags and TRITON_PERF_* variables override them.

    The table's default is perf_fail_ratio=0 (no failed request allowed).
    """
    Targets(**limits)  # a bad name or value fails at import of the locustfile
    _locustfile_targets.update(limits)


def add_options(parser: Any) -> None:
    """Locust's init_command_line_parser listener."""
    add_arguments(parser, "locust", env_vars=True)


def attach_config(environment: Any, config: TritonConfig) -> None:
    """Library use (triton-perf's generator): the config its users run with."""
    setattr(environment, CONFIG_ATTRIBUTE, config)


def run_config(environment: Any) -> TritonConfig:
    """The run's settings: Locust's parsed options (the master's, on a worker) over the
    locustfile's default targets over the table's defaults."""
    attached = getattr(environment, CONFIG_ATTRIBUTE, None)
    if attached is not None:
        return attached
    sources = [from_mapping(_locustfile_targets, "locustfile default_targets()")]
    if environment.parsed_options is not None:
        sources.insert(0, from_arguments(environment.parsed_options, "locust"))
    return resolve(*sources)
