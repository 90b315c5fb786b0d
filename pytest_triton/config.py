"""One resolved, typed configuration: factory argument > CLI > ini > default.

An explicit 0, False or "" at any level is a value and wins over the levels below it;
only an option nobody set falls through.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest

from .errors import ConfigError
from .options import BY_NAME, OPTIONS
from .repository.spec import FORMATS, GPU_FORMATS


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class TritonConfig:
    launcher: str
    url: str | None
    grpc_url: str | None
    executable: str | None
    protocol: tuple[str, ...]
    startup_timeout: float
    request_timeout: float
    server_args: tuple[str, ...]
    model_control: str
    formats: tuple[str, ...]
    log_verbose: int
    repository_dir: str | None
    specs: str | None
    backends: tuple[str, ...] | None
    gpu: bool
    gpus: str
    image: str | None
    origins: dict[str, str] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def protocols(self) -> tuple[str, ...]:
        return self.protocol

    def with_overrides(self, overrides: dict[str, Any]) -> TritonConfig:
        """Factory arguments on top of this config; re-derives the launcher."""
        unknown = sorted(set(overrides) - set(BY_NAME))
        if unknown:
            raise ConfigError(f"unknown pytest-triton setting(s) {unknown}; known: "
                              f"{', '.join(BY_NAME)}")
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        origins = dict(self.origins)
        for name, raw in overrides.items():
            values[name] = BY_NAME[name].convert(raw, f"factory argument {name}=")
            origins[name] = "factory argument"
        if "launcher" not in overrides and origins.get("launcher") == "derived":
            values["launcher"] = "auto"
        values["origins"] = origins
        return _finish(values)


def _finish(values: dict[str, Any]) -> TritonConfig:
    """Derive the launcher from url/gpu when left on auto, and reject contradictions."""
    origins = values["origins"]
    if values["launcher"] == "auto":
        values["launcher"] = ("external" if values["url"] else
                              "container" if values["gpu"] else "local")
        origins["launcher"] = "derived"
    if values["launcher"] == "external" and not values["url"]:
        raise ConfigError("the external launcher needs --triton-url (or triton_url in ini), "
                          "e.g. --triton-url http://127.0.0.1:8000")
    if values["gpu"] and origins.get("formats") == "default":
        values["formats"] = FORMATS + GPU_FORMATS  # TensorRT and ORT-TensorRT join on a GPU
    if values["gpu"] and values["launcher"] != "container":
        raise ConfigError(f"--triton-gpu runs the server in a GPU container, but the launcher is "
                          f"{values['launcher']!r} ({origins.get('launcher')}); drop "
                          "--triton-launcher or set it to container")
    return TritonConfig(**values)


def resolve(pytestconfig: pytest.Config | None = None, **overrides: Any) -> TritonConfig:
    """Resolve every option once; ConfigError names the option and where its value came from."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for option in OPTIONS:
        value, origin = UNSET, "default"
        if option.name in overrides:
            value, origin = overrides[option.name], "factory argument"
        if value is UNSET and pytestconfig is not None:
            cli = pytestconfig.getoption(option.dest, default=None)
            if cli is not None:
                value, origin = cli, f"command line {option.cli}"
        if value is UNSET and pytestconfig is not None:
            ini = pytestconfig.getini(option.ini)
            if ini is not UNSET:
                value, origin = ini, f"ini {option.ini}"
        if value is UNSET:
            value = option.default
        values[option.name] = option.convert(value, origin)
        origins[option.name] = origin
    values["origins"] = origins
    return _finish(values)
