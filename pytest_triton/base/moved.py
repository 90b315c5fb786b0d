"""Names that moved since 0.1.0 keep working from their old paths, with a DeprecationWarning
naming the new one: a user's locustfile or conftest written against 0.1.0 (the README of the
time showed `from pytest_triton.load.embedded import EmbeddedModel`) still runs.

Two kinds of move: a module that went elsewhere, and a module that became a package of the
same name (the package's `__getattr__` forwards the old module's names). A moved module's old
path is a two-line stub in base/old_paths/, a folder laid out as 0.1.0's package was, which
`pytest_triton` and `pytest_triton.load` add to their own `__path__`: no import hook, nothing
installed when the package is imported. The tables here are the one place to extend when a
module moves again (with a stub per old path; a test checks that both agree); CHANGELOG.md
lists them. Public aliases (`pytest_triton.factories`) resolve without a warning. Imports no
other part of the package: the targets are imported by name.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGE = "pytest_triton"
STUBS = str(Path(__file__).parent / "old_paths")
"""The old paths' stubs: added to the package's search path (pytest_triton/__init__.py)."""

MOVED_MODULES: dict[str, str] = {
    # 0.1.0 path (without "pytest_triton.") -> where it lives now
    "config": "base.config",
    "dtypes": "base.dtypes",
    "errors": "base.errors",
    "formats": "base.formats",
    "importing": "base.importing",
    "processes": "base.processes",
    "target": "base.server_offer",
    "urls": "base.urls",
    "health": "base.watched_servers",
    "request_errors": "client.failures",
    "stats": "client.stats",
    "wire": "client.wire",
    "wire.grpc_call": "client.wire.grpc_call",
    "wire.grpc_h2": "client.wire.grpc_h2",
    "wire.http_conn": "client.wire.http_conn",
    "wire.http_control": "client.wire.http_control",
    "wire.idle": "client.wire.idle",
    "wire.lane": "client.wire.lane",
    "wire.request": "client.wire.request",
    "wire.shm": "client.wire.shm",
    "results": "parity.results",
    "reference": "repository.reference",
    "launchers": "server",
    "launchers.base": "server.launcher",
    "launchers.container": "server.container",
    "launchers.docker_engine": "server.docker_engine",
    "launchers.external": "server.external",
    "launchers.gpu": "server.gpu",
    "launchers.hosted_env": "server.hosted_env",
    "launchers.local": "server.local",
    "launchers.select": "server.choice",
    "launchers.tensorrt": "server.tensorrt",
    "deployment": "session.deployment",
    "reporting": "plugin.gate_report",
    "load.arrivals": "load.measure.arrivals",
    "load.embedded": "load.runner.embedded",
    "load.generator_cpu": "load.runner.generator_cpu",
    "load.grpc_gevent": "load.runner.grpc_gevent",
    "load.hooks": "load.runner.listeners",
    "load.monitor": "load.runner.monitor",
    "load.multiplexer": "load.runner.multiplexer",
    "load.open_loop": "load.runner.open_loop",
    "load.options": "load.runner.options",
    "load.recording": "load.runner.recording",
    "load.run": "load.runner.run",
    "load.user_settings": "load.runner.user_settings",
    "load.verdict": "load.runner.verdict",
    "load.server_report": "load.measure.server_side",
    "load.targets": "load.measure.targets",
    "load.window_log": "load.measure.window_log",
    "load.windows": "load.measure.windows",
    "load._generator": "load.perf.generator",
    "load.sweep": "load.perf.command",
    "load.sweep_report": "load.perf.report",
    "load.live": "load.webui.live",
    "load.live_report": "load.webui.snapshot",
    "load.web_tab": "load.webui.tab",
}
"""Modules that became packages of the same name: their old names now live in these modules
(forwarded by the package's `__getattr__`)."""
BECAME_PACKAGES: dict[str, str | tuple[str, ...]] = {
    "client": "client.triton_client",
    "parity": "parity.compare",
    "session": "session.lifecycle",
    "cli": "cli.deploy",
    # load/perf.py's names (the sweep's points) went to load/perf/points.py: the package has
    # the old module's name again (0.1.0's load/sweep.py is load/perf/command.py)
    "load.perf": ("load.perf.command", "load.perf.points"),
}
"""Names that left a module which stays (its command-line part went to cli/): the module's
`__getattr__` (moved_names) finds them where they are now."""
MOVED_NAMES: dict[str, dict[str, str]] = {
    # the settings table kept its rows; its parsers, sources and resolution left it
    "base.config": {
        "DASH_VALUE_FLAGS": "base.setting_sources",
        "SHARED_MEMORY": "base.setting_parsers",
        "Source": "base.setting_sources",
        "add_arguments": "base.setting_sources",
        "as_values": "base.setting_sources",
        "check_environ": "base.setting_sources",
        "check_goodput": "base.config_resolution",
        "check_replicas_behind": "base.config_resolution",
        "check_stream_goodput": "base.config_resolution",
        "client_security": "base.config_resolution",
        "foreign_variables": "base.setting_sources",
        "from_arguments": "base.setting_sources",
        "from_environ": "base.setting_sources",
        "from_mapping": "base.setting_sources",
        "from_namespace": "base.setting_sources",
        "from_values": "base.setting_sources",
        "join_dash_values": "base.setting_sources",
        "resolve": "base.config_resolution",
    },
    # the zoo's generator went to the zoo; the module keeps the generic StreamSpec
    "repository.stream": {"TinyGenerator": "models.tiny_generator"},
    "load.perf.command": {"perf_main": "cli.triton_perf", "perf_config": "cli.triton_perf"},
    "load.tune.tuner": {
        "tune_main": "cli.triton_tune",
        "options_from": "cli.triton_tune",
        "open_table": "cli.triton_tune",
    },
}
PUBLIC_ALIASES: dict[str, str] = {
    "factories": "plugin.factories",  # public since 0.1.0: `import pytest_triton.factories`
}


def _full(name: str) -> str:
    return f"{PACKAGE}.{name}"


def moved_to(name: str) -> str | None:
    """Where the module once named `name` (dotted, with the package) lives now; None where it
    did not move."""
    if not name.startswith(PACKAGE + "."):
        return None
    new = MOVED_MODULES.get(name[len(PACKAGE) + 1 :])
    return None if new is None else _full(new)


def _caller_level() -> int:
    """The stack level of the first frame outside the import machinery, this module and the
    old paths' stubs, so that the warning points at the user's import line (warnings itself
    does not count the frames of importlib._bootstrap)."""
    frame = sys._getframe(2)  # warn_moved's caller
    level = 2
    while frame is not None:
        name = frame.f_code.co_filename
        internal = "importlib" in name and "_bootstrap" in name
        if not internal and name != __file__ and not name.startswith(STUBS):
            break
        level += 0 if internal else 1
        frame = frame.f_back  # type: ignore[assignment]
    return level


def warn_moved(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new} after pytest-triton 0.1.0; import it from there: the old path "
        "will be removed in a later release",
        DeprecationWarning,
        stacklevel=_caller_level(),
    )


def run_moved_command(old: str, new: str, main: str, command: str) -> None:
    """`python -m pytest_triton.OLD`, as before the command line moved to NEW: still runs it
    (NEW's `main`, by name: the layer of OLD does not import the front end), and says where
    it is now."""
    warnings.warn(
        f"python -m {_full(old)} moved to python -m {_full(new)} (or {command})",
        DeprecationWarning,
        stacklevel=2,
    )
    raise SystemExit(getattr(importlib.import_module(_full(new)), main)())


def old_path(name: str) -> Callable[[str], Any]:
    """What the stub at an old path does (base/old_paths/): warn, then give the old name the
    module that holds it now (the same module object); a package's stub stays, and its
    `__getattr__` (this function's answer) finds the new package's names and the stubs of its
    old submodules, so that no module is ever loaded twice under two names."""
    short = name[len(PACKAGE) + 1 :]
    if short in PUBLIC_ALIASES:
        new = _full(PUBLIC_ALIASES[short])
    else:
        new = _full(MOVED_MODULES[short])
        warn_moved(name, new)
    module = importlib.import_module(new)
    if not hasattr(module, "__path__"):
        sys.modules[name] = module  # the import system hands this to the importer

    def __getattr__(attr: str) -> Any:
        if f"{short}.{attr}" in MOVED_MODULES:
            return importlib.import_module(f"{name}.{attr}")
        if attr.startswith("__"):
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        return getattr(module, attr)

    return __getattr__


def forwarder(package: str) -> Callable[[str], Any]:
    """A package's `__getattr__` that finds a name of the module it replaced (now in its
    BECAME_PACKAGES module), with the warning."""
    short = package[len(PACKAGE) + 1 :]
    homes = BECAME_PACKAGES[short]
    targets = [_full(t) for t in ((homes,) if isinstance(homes, str) else homes)]
    warned: set[str] = set()

    def __getattr__(name: str) -> Any:
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")  # a submodule: not moved
        if not name.startswith("__"):
            for target in targets:
                module = importlib.import_module(target)
                if hasattr(module, name):
                    if name not in warned:  # `from P import X` asks twice
                        warned.add(name)
                        warn_moved(f"{package}.{name}", f"{target}.{name}")
                    return getattr(module, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def moved_names(module: str) -> Callable[[str], Any]:
    """A module's `__getattr__` for the names MOVED_NAMES says left it, with the warning."""
    homes = MOVED_NAMES[module[len(PACKAGE) + 1 :]]

    def __getattr__(name: str) -> Any:
        if name in homes:
            new = _full(homes[name])
            warn_moved(f"{module}.{name}", f"{new}.{name}")
            return getattr(importlib.import_module(new), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
