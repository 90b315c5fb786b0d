"""Where setting values come from: command lines (argparse, Locust's ConfigArgParse),
TRITON_* variables, ini keys and mappings; each a Source that `resolve` reads in order."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_triton.base.config import (
    ENV_FRONTS,
    SETTINGS,
    Front,
    Setting,
    TritonConfig,
    check_names,
    settings_for,
)
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_parsers import parse_shell_words

DASH_VALUE_FLAGS: frozenset[str] = frozenset(
    flag for s in SETTINGS if s.parse is parse_shell_words for flag in (s.cli, *s.aliases)
)
"""Flags whose value is itself a list of flags (tritonserver's arguments)."""


def join_dash_values(argv: Sequence[str]) -> list[str]:
    """`--triton-server-args "--repository-poll-secs=1"`, as the docs write it: argparse reads
    a value that begins with '-' as another option ("expected one argument"), so each such
    value is joined to its flag (`--triton-server-args=--repository-poll-secs=1`) before any
    front end parses its command line."""
    joined: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg in DASH_VALUE_FLAGS and index + 1 < len(argv) and argv[index + 1].startswith("-"):
            joined.append(f"{arg}={argv[index + 1]}")
            index += 2
        else:
            joined.append(arg)
            index += 1
    return joined


Source = Callable[[Setting], "tuple[Any, str] | None"]
"""Where values come from: a setting's raw value and a label of its origin, or None."""


def from_mapping(values: Mapping[str, Any], origin: str) -> Source:
    """Values by setting name (factory arguments, a locustfile's defaults); None is unset."""
    check_names(values)

    def lookup(setting: Setting) -> tuple[Any, str] | None:
        value = values.get(setting.name)
        return None if value is None else (value, f"{origin} {setting.name}=")

    return lookup


def from_namespace(namespace: Any, origin: Callable[[Setting], str]) -> Source:
    """Values of parsed options (argparse, Locust's parser) by their dest; None and "" are
    unset (Locust's web UI sends every custom option back, empty ones as "")."""

    def lookup(setting: Setting) -> tuple[Any, str] | None:
        value = getattr(namespace, setting.dest, None)
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return value, origin(setting)

    return lookup


class _NotTaken(argparse.Action):
    """The flag of a setting this front end does not take: refused naming it and who takes
    it, rather than read by a parser that abbreviates as one of its own (Locust's takes
    --triton-report as --triton-report-json)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        self.refusal = kwargs.pop("refusal")
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        parser.error(f"{option}: {self.refusal}")


def add_arguments(parser: Any, front: Front, *, env_vars: bool = False) -> None:
    """Add the front end's settings to an argparse parser (Locust's is a ConfigArgParse one,
    which also reads each from its environment variable and shows it in the web UI, and
    abbreviates: there the other settings' flags are added too, each refused by name)."""
    standalone = front in ("perf", "tune", "deploy")
    if env_vars:
        for setting in SETTINGS:
            if front not in setting.fronts and not setting.internal:
                takers = ", ".join(sorted(setting.fronts))
                parser.add_argument(
                    setting.cli,
                    dest="not_taken_" + setting.name,
                    action=_NotTaken,
                    refusal=f"{front} does not take this setting (only {takers})",
                    help=argparse.SUPPRESS,
                    include_in_web_ui=False,
                )
    for setting in settings_for(front):
        flags = [setting.cli, *(setting.aliases if standalone else ())]
        kwargs: dict[str, Any] = {"dest": setting.dest, "default": None}
        if env_vars:
            kwargs["env_var"] = setting.env
            kwargs["include_in_web_ui"] = not setting.internal
        kwargs["help"] = (
            argparse.SUPPRESS
            if setting.internal
            else setting.describe() + (f" [env {setting.env}]" if env_vars else "")
        )
        if setting.flag:
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = setting.metavar or "X"
        parser.add_argument(*flags, **kwargs)


def from_arguments(namespace: Any, front: Front) -> Source:
    """What add_arguments parsed; errors name the flag (and its variable, for Locust)."""
    if front == "locust":
        return from_namespace(namespace, lambda s: f"{s.cli} (or {s.env})")
    return from_namespace(namespace, lambda s: f"command line {s.cli}")


def from_environ(environ: Mapping[str, str], front: Front) -> Source:
    """TRITON_X variables of the front end's settings (Locust's parser reads its own)."""

    def lookup(setting: Setting) -> tuple[Any, str] | None:
        value = environ.get(setting.env, "")
        if front not in setting.fronts or not value.strip():
            return None
        return value, setting.env

    return lookup


def foreign_variables(environ: Mapping[str, str], front: Front) -> list[tuple[str, str]]:
    """(variable, why it is refused) for each TRITON_* variable set that `front` would
    otherwise ignore: a setting given where it is not taken is never silently dropped.

    Locust, triton-perf and triton-tune read the variables of their own settings, so any other
    setting's variable is refused. pytest and triton-deploy read none: the variable of a
    setting they take is refused (pass the flag); the others are left to the load tools a
    session may run (triton-tune's gate inside pytest reads TRITON_MEASUREMENT_INTERVAL).
    """
    found = []
    for setting in SETTINGS:
        if setting.internal or not environ.get(setting.env, "").strip():
            continue
        if front in ENV_FRONTS:
            if front not in setting.fronts:
                takers = ", ".join(sorted(setting.fronts))
                found.append((setting.env, f"{front} does not take {setting.cli} (only {takers})"))
        elif front in setting.fronts:
            ini = f" (or {setting.ini} in the ini file)" if front == "pytest" else ""
            found.append(
                (setting.env, f"{front} reads no TRITON_* variables: pass {setting.cli}{ini}")
            )
    return found


def check_environ(environ: Mapping[str, str], front: Front) -> None:
    """Refuse TRITON_* variables of settings this front end does not read, naming each."""
    found = foreign_variables(environ, front)
    if found:
        raise ConfigError(
            "; ".join(f"{env} is set, but {why}" for env, why in found)
            + f"; unset {', '.join(env for env, _ in found)}"
        )


def as_values(config: TritonConfig) -> dict[str, Any]:
    """Every setting's value, JSON-friendly (to hand a config to another process)."""
    return {
        s.name: list(v) if isinstance(v := config.value(s.name), tuple) else v for s in SETTINGS
    }


def from_values(values: Mapping[str, Any], origin: str) -> Source:
    """The inverse of as_values: lists become the tuples the settings hold."""
    return from_mapping(
        {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}, origin
    )
