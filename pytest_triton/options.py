"""The one table of settings: each row becomes a --triton-* option and a triton_* ini key."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .repository.spec import FORMATS, GPU_FORMATS


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.replace("\n", ",").split(",") if p.strip())


def parse_protocols(text: str) -> tuple[str, ...]:
    items = parse_list(text)
    if items == ("both",):
        return ("http", "grpc")
    bad = [p for p in items if p not in ("http", "grpc")]
    if bad or not items:
        raise ValueError(f"expected http, grpc or both, got {text!r}")
    return tuple(dict.fromkeys(items))


def parse_formats(text: str) -> tuple[str, ...]:
    items = parse_list(text)
    known = FORMATS + GPU_FORMATS
    bad = [f for f in items if f not in known]
    if bad or not items:
        raise ValueError(f"unknown format(s) {bad or text!r}; choose from {', '.join(known)}")
    return items


def parse_positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(f"expected a number of seconds > 0, got {text!r}")
    return value


def parse_optional(text: str) -> str | None:
    return text.strip() or None


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str
    choices: tuple[str, ...] | None = None
    flag: bool = False  # a CLI switch (--triton-gpu) rather than --triton-x VALUE
    metavar: str | None = None

    @property
    def default_text(self) -> str:
        if self.default is None or self.default == ():
            return "none"
        if isinstance(self.default, tuple):
            return ",".join(self.default)
        return str(self.default).lower() if isinstance(self.default, bool) else str(self.default)

    @property
    def cli(self) -> str:
        return "--triton-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "triton_" + self.name

    @property
    def dest(self) -> str:
        return "triton_" + self.name

    def convert(self, raw: Any, origin: str) -> Any:
        """Parse a CLI/ini string (values from factory arguments are taken as they are)."""
        if not isinstance(raw, str):
            return raw
        try:
            value = self.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{origin}: {raw!r} is not one of {', '.join(self.choices)}")
        return value


OPTIONS: tuple[Option, ...] = (
    Option("launcher", "auto",
           "where tritonserver runs: local child process, container (testcontainers), or "
           "external (--triton-url); auto = external with a URL, container with --triton-gpu, "
           "else local",
           choices=("auto", "local", "container", "external")),
    Option("url", None, "URL of a running server (http://HOST:PORT or grpc://HOST:PORT); "
           "implies the external launcher", parse=parse_optional, metavar="URL"),
    Option("grpc_url", None, "gRPC URL of the external server (default: HTTP port + 1)",
           parse=parse_optional, metavar="URL"),
    Option("executable", None, "tritonserver binary for the local launcher (default: PATH, "
           "then the one bundled in nvidia-pytriton)", parse=parse_optional, metavar="PATH"),
    Option("protocol", ("http", "grpc"), "protocols the client fixture is parametrized over: "
           "http, grpc or both", parse=parse_protocols, metavar="http|grpc|both"),
    Option("startup_timeout", 120.0, "seconds to wait for the server to become ready",
           parse=parse_positive_float, metavar="SECONDS"),
    Option("request_timeout", 120.0, "client network timeout in seconds",
           parse=parse_positive_float, metavar="SECONDS"),
    Option("server_args", (), "extra tritonserver arguments, shell-quoted "
           "(e.g. \"--log-info=true --pinned-memory-pool-byte-size=0\")",
           parse=lambda s: tuple(shlex.split(s)), metavar="ARGS"),
    Option("model_control", "explicit", "tritonserver --model-control-mode; explicit loads "
           "each model when a test first needs it, so one broken model fails only its tests",
           choices=("explicit", "none", "poll")),
    Option("formats", FORMATS, "export formats to serve, comma-separated", parse=parse_formats,
           metavar="LIST"),
    Option("log_verbose", 0, "tritonserver --log-verbose level", parse=int, metavar="N"),
    Option("repository_dir", None, "build the model repository here and keep it (default: a "
           "temporary directory removed at the end)", parse=parse_optional, metavar="DIR"),
    Option("specs", None, "MODULE:CALLABLE returning the ModelSpecs of the default "
           "triton_repository fixture", parse=parse_optional, metavar="MODULE:CALLABLE"),
    Option("backends", None, "backends the external server has (comma-separated; default "
           "python), deciding native or python-hosted variants", parse=parse_list,
           metavar="LIST"),
    Option("gpu", False, "run on a GPU Triton container (NGC image, native backends, "
           "TensorRT); stops at once if Docker, the nvidia runtime or a GPU is missing",
           parse=parse_bool, flag=True),
    Option("gpus", "all", "GPUs for --triton-gpu: all or a comma list of ordinals (0,1)",
           metavar="all|0,1"),
    Option("image", None, "container image (default: the NGC image with --triton-gpu, else "
           "the offline CPU image built by docker/build-cpu-image)", parse=parse_optional,
           metavar="IMAGE"),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
