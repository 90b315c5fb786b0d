"""The server a locustfile starts for itself when it is given no --host, and the host rules.

Load is only ever sent to loopback addresses unless the caller opts in: a load test pointed at
a shared server by a typo is an outage, not a test. No locust import here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import ipaddress
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..config import resolve
from ..deployment import Deployment
from ..errors import ConfigError
from ..factories import start_deployment
from ..launchers.base import Endpoints
from ..launchers.external import parse_url
from ..repository.builder import Repository
from ..repository.spec import FORMATS, ModelSpec
from ..repository.variants import Variant

log = logging.getLogger("pytest_triton.load")
DEFAULT_FORMAT = "onnx"
EXPORTER_LOGGERS = ("onnx_ir", "onnxscript", "torch.onnx", "torch.export")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost",
                            "ip6-loopback"})
SpecSource = ModelSpec | Callable[[], ModelSpec]
Size = Literal["small", "full"]


@dataclass
class EmbeddedModel:
    """A spec a locustfile serves itself when it gets no --host; `fmt` is the export format
    (served by the python backend on the bundled CPU server)."""

    source: SpecSource
    fmt: str = DEFAULT_FORMAT
    _spec: ModelSpec | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        check_format(self.fmt)

    @property
    def spec(self) -> ModelSpec:
        with self._lock:
            if self._spec is None:
                self._spec = self.source if isinstance(self.source, ModelSpec) else self.source()
            return self._spec

    def variant(self, fmt: str | None = None) -> Variant:
        return Variant(self.spec, fmt or self.fmt, "fp32", hosted=True)

    def model_name(self, fmt: str | None = None) -> str:
        """The Triton model name the embedded server gives this spec (hosted or native alike)."""
        return self.variant(fmt).model_name

    def inputs(self, batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
        return self.spec.make_inputs(batch_size, seed)


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"export format {fmt!r} cannot be served on CPU; choose from "
                          f"{', '.join(FORMATS)}")
    return fmt


class EmbeddedServer:
    """A local tritonserver serving some specs from a temporary repository.

    stop() is idempotent and removes the server, its python stubs and the repository; the
    local launcher also stops the server at interpreter exit and when this process dies.
    """

    def __init__(self, models: Sequence[EmbeddedModel], fmt: str | None = None, *,
                 executable: str | None = None, startup_timeout_s: float = 120.0,
                 progress: Callable[[str], None] | None = None) -> None:
        if not models:
            raise ConfigError("nothing to serve: no user class names a model to serve itself")
        self.models = list(models)
        self.fmt = check_format(fmt) if fmt else None
        self.executable = executable
        self.startup_timeout_s = startup_timeout_s
        self.progress = progress or log.info
        self.root: Path | None = None
        self.deployment: Deployment | None = None
        self._lock = threading.Lock()

    @property
    def endpoints(self) -> Endpoints:
        if self.deployment is None:
            raise RuntimeError("the embedded server is not running")
        return self.deployment.server.endpoints

    def model_names(self) -> list[str]:
        return [m.model_name(self.fmt) for m in self.models]

    def start(self) -> Endpoints:
        """Export every model, start the server, load them; on any failure leave nothing."""
        specs: dict[str, ModelSpec] = {}
        for m in self.models:
            fmt = self.fmt or m.fmt
            specs.setdefault(m.spec.name, dataclasses.replace(m.spec, formats=(fmt,)))
        self.root = Path(tempfile.mkdtemp(prefix="pytest-triton-load-"))
        try:
            repo = Repository(self.root, list(specs.values()), progress=self.progress)
            overrides: dict[str, object] = {"launcher": "local", "model_control": "explicit",
                                            "startup_timeout": self.startup_timeout_s}
            if self.executable:
                overrides["executable"] = self.executable
            self.deployment = start_deployment(resolve(None, **overrides), repo)
            with _quiet(EXPORTER_LOGGERS):
                for name in self.model_names():
                    self.deployment.load(repo.variant(name))
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    def stop(self) -> None:
        with self._lock:
            deployment, self.deployment = self.deployment, None
            root, self.root = self.root, None
        try:
            if deployment is not None:
                deployment.close()
        finally:
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _quiet(names: Sequence[str]) -> Iterator[None]:
    """The ONNX exporter's passes log at INFO, which Locust's logging shows: not our news."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(lg.level, logging.WARNING))
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


# -- hosts ---------------------------------------------------------------------------------
def is_loopback(url: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the usual loopback names (names are not resolved: what a
    name resolves to can change between this check and the load)."""
    _, hostport = parse_url(url)
    host = hostport.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() in LOOPBACK_NAMES


def check_host(url: str, allow_remote: bool = False) -> None:
    """Refuse load on anything but loopback unless the caller opted in."""
    parse_url(url)  # a malformed URL gets the format message first
    if not allow_remote and not is_loopback(url):
        raise ConfigError(
            f"refusing to send load to {url}: only loopback hosts (127.0.0.1, localhost, ::1) "
            "are allowed by default. Pass --triton-allow-remote (or TRITON_ALLOW_REMOTE=true) "
            "if you really mean to load that server.")


def encode_endpoints(endpoints: Endpoints) -> str:
    """Endpoints as one option value (master -> workers, which get the master's options)."""
    return f"http={endpoints.http},grpc={endpoints.grpc}"


def decode_endpoints(text: str) -> Endpoints:
    parts: Mapping[str, str] = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
    if "http" not in parts or "grpc" not in parts:
        raise ConfigError(f"malformed endpoints {text!r}; expected http=H:P,grpc=H:P")
    return Endpoints(parts["http"], parts["grpc"])


def zoo_model(name: str, size: Size = "small", *, fmt: str = DEFAULT_FORMAT, seed: int = 0,
              **overrides: Any) -> EmbeddedModel:
    """A zoo model with its committed serving settings, built only when first needed."""
    from ..models import zoo_spec

    return EmbeddedModel(lambda: zoo_spec(name, size, seed=seed, **overrides), fmt)


def model_source(source: str, size: Size = "small", fmt: str = DEFAULT_FORMAT) -> EmbeddedModel:
    """A zoo name (dlrm, mnist, ...), or MODULE:CALLABLE returning a ModelSpec."""
    if ":" not in source:
        return zoo_model(source, size, fmt=fmt)
    module, _, name = source.partition(":")
    try:
        factory: Callable[[], ModelSpec] = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {source!r}: {exc}") from None
    return EmbeddedModel(factory, fmt)
