"""The server a locustfile (or triton-perf) starts for itself when it is given no host.

No locust import here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.formats import CPU_FORMATS
from pytest_triton.base.importing import load_object
from pytest_triton.base.urls import Endpoints

if TYPE_CHECKING:  # the repository layer imports torch: only a model served here needs it
    from torch import nn

    from pytest_triton.repository.builder import Repository
    from pytest_triton.repository.reference import NativeModel
    from pytest_triton.repository.sequence import SequenceSpec
    from pytest_triton.repository.spec import ModelSpec
    from pytest_triton.repository.stream import StreamSpec
    from pytest_triton.repository.variants import Variant
    from pytest_triton.session.deployment import Deployment

log = logging.getLogger("pytest_triton.load")
DEFAULT_FORMAT = "onnx"
EXPORTER_LOGGERS = ("onnx_ir", "onnxscript", "torch.onnx", "torch.export")
SpecSource: TypeAlias = "ModelSpec | Callable[[], ModelSpec]"
Size = Literal["small", "full"]


@dataclass
class EmbeddedModel:
    """A spec a locustfile serves itself when it gets no --host; `fmt` is the export format
    (served by the python backend of the bundled server). None: the server's default, onnx
    on the CPU, on a GPU the first format the server can serve there (served_format)."""

    source: SpecSource
    fmt: str | None = None
    _spec: ModelSpec | None = field(default=None, init=False, repr=False)
    _native: NativeModel | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.fmt is not None:
            check_format(self.fmt)

    @property
    def spec(self) -> ModelSpec:
        from pytest_triton.repository.spec import ModelSpec

        with self._lock:
            if self._spec is None:
                self._spec = self.source if isinstance(self.source, ModelSpec) else self.source()
                _single_threaded_torch()
            return self._spec

    @property
    def format(self) -> str:
        """The format it is served in where none is named for the run."""
        return self.fmt or DEFAULT_FORMAT

    def variant(self, fmt: str | None = None) -> Variant:
        from pytest_triton.repository.variants import Variant

        return Variant(self.spec, fmt or self.format, "fp32", hosted=True)

    def model_name(self, fmt: str | None = None) -> str:
        """The Triton model name the embedded server gives this spec (hosted or native alike)."""
        return self.variant(fmt).model_name

    def inputs(self, batch_size: int, seed: int = 0) -> dict[str, Array]:
        return self.spec.make_inputs(batch_size, seed)

    def reference(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        """PyTorch's outputs for `inputs` (the spec's module at fp32 on the CPU, as parity
        computes them): what a right answer of the served model is."""
        from pytest_triton.repository.reference import NativeModel

        spec = self.spec
        with self._lock:
            if self._native is None:
                self._native = NativeModel(spec)
            native = self._native
        return native(inputs)


def _single_threaded_torch() -> None:
    """A load generator makes inputs and references with torch on one thread: fork-safe for
    Locust's --processes, and the cores stay the server's."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@dataclass(eq=False)
class EmbeddedSequenceModel:
    """A stateful model (SequenceSpec) a locustfile serves itself when it gets no --host:
    exported as its spec says, hosted by the python backend, behind the sequence batcher."""

    source: SequenceSpec | Callable[[], SequenceSpec]
    _spec: SequenceSpec | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def spec(self) -> SequenceSpec:
        with self._lock:
            if self._spec is None:
                from pytest_triton.repository.sequence import SequenceSpec

                made = self.source if isinstance(self.source, SequenceSpec) else self.source()
                self._spec = made
            return self._spec

    def model_name(self, fmt: str | None = None) -> str:
        """The Triton model name (`fmt` is ignored: a stateful model has one export)."""
        return self.spec.model_name


@dataclass(eq=False)
class EmbeddedStream:
    """A decoupled token generator a stream locustfile serves itself when it gets no --host:
    written as it is (TorchScript in a python-backend model), whatever the export format."""

    spec: StreamSpec

    def model_name(self, fmt: str | None = None) -> str:
        return self.spec.name

    def write(self, root: Path) -> None:
        from pytest_triton.repository.stream import write_stream_model

        write_stream_model(root, self.spec)

    def reference(self) -> nn.Module:
        """The PyTorch module whose greedy generation a right stream carries."""
        return self.spec.module()


Served: TypeAlias = "EmbeddedModel | EmbeddedSequenceModel | EmbeddedStream"


def embedded_config(config: TritonConfig) -> TritonConfig:
    """The configuration of the server a load test starts itself: a local one (on its GPU with
    --triton-gpu), loading each model when asked."""
    return config.with_overrides({"launcher": "local", "model_control": "explicit"})


def check_gpu_host(config: TritonConfig, host: str | None, flag: str) -> None:
    """--triton-gpu starts the load test's own server on a GPU; a given server runs where it
    runs, so the flag would be ignored: refused."""
    if config.server.gpu and host:
        raise ConfigError(
            f"--triton-gpu serves the model on a GPU of the server started here; with {flag} "
            f"the load goes to a running server, which runs where it runs: leave out "
            f"--triton-gpu (or {flag})"
        )


def served_format(config: TritonConfig, models: Sequence[Served]) -> str | None:
    """The format the embedded server serves: --triton-format, else each model's own, else the
    default. On a GPU each named format is checked against what the server offers there
    (refused with the reason), and where none is named it is the first the server can serve
    on its GPU: the bundled server's onnxruntime has no CUDA provider, so TorchScript. Asking
    the server what it offers runs the GPU preflight: no GPU stops here, before any export."""
    if not config.server.gpu:
        return config.serving.format
    from pytest_triton.repository.variants import check_servable, default_format
    from pytest_triton.session.lifecycle import server_target

    target = server_target(embedded_config(config))
    if config.serving.format:
        return check_servable(config.serving.format, target)
    own = [m.fmt for m in models if isinstance(m, EmbeddedModel) and m.fmt]
    for fmt in own:
        check_servable(fmt, target)
    if own or not any(isinstance(m, EmbeddedModel) for m in models):
        return None  # each model's own (a model without one gets onnx, checked above)
    return default_format(target)


def check_format(fmt: str) -> str:
    if fmt not in CPU_FORMATS:
        raise ConfigError(
            f"export format {fmt!r} cannot be served on CPU; choose from {', '.join(CPU_FORMATS)}"
        )
    return fmt


class EmbeddedServer:
    """A local tritonserver serving some specs from a temporary repository.

    Server settings (executable, startup timeout, extra arguments) come from `config`. stop()
    is idempotent and removes the server, its python stubs and the repository; the local
    launcher also stops the server at interpreter exit and when this process dies.
    """

    def __init__(
        self,
        models: Sequence[Served],
        fmt: str | None = None,
        *,
        config: TritonConfig | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if not models:
            raise ConfigError("nothing to serve: no user class names a model to serve itself")
        self.models = list(models)
        self.fmt = check_format(fmt) if fmt else None
        self.config = embedded_config(config or resolve())
        self.progress = progress or log.info
        self.repository: Repository | None = None
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
        from pytest_triton.repository.builder import Repository
        from pytest_triton.session.lifecycle import launcher_for, start_deployment

        launcher_for(self.config)  # the launcher's preflight (a GPU), before any export
        specs: dict[str, ModelSpec] = {}
        streams = [m for m in self.models if isinstance(m, EmbeddedStream)]
        for m in self.models:
            if isinstance(m, EmbeddedModel):
                fmt = self.fmt or m.format
                specs.setdefault(m.spec.name, dataclasses.replace(m.spec, formats=(fmt,)))
        try:
            self.repository = repo = Repository.create(list(specs.values()), progress=self.progress)
            self.deployment = start_deployment(self.config, repo)
            with _quiet(EXPORTER_LOGGERS):
                for m in self.models:
                    if isinstance(m, EmbeddedSequenceModel):
                        from pytest_triton.session.served_sequences import serve_sequence_model

                        serve_sequence_model(self.deployment, m.spec)
                    elif isinstance(m, EmbeddedModel):
                        self.deployment.load(repo.variant(m.model_name(self.fmt)))
            for stream in streams:  # explicit model control: written, then loaded by name
                stream.write(repo.root)
                self.deployment.client("http").load_model(stream.model_name())
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    def stop(self) -> None:
        with self._lock:
            deployment, self.deployment = self.deployment, None
            repository, self.repository = self.repository, None
        try:
            if deployment is not None:
                deployment.close()
        finally:
            if repository is not None:
                repository.remove()


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


def zoo_model(
    name: str, size: Size = "small", *, fmt: str | None = None, seed: int = 0, **overrides: Any
) -> EmbeddedModel:
    """A zoo model with its committed serving settings, built only when first needed."""
    from pytest_triton.models import zoo_spec

    return EmbeddedModel(lambda: zoo_spec(name, size, seed=seed, **overrides), fmt)


def model_source(source: str, size: Size = "small", fmt: str | None = None) -> EmbeddedModel:
    """A zoo name (dlrm, mnist, ...), or MODULE:CALLABLE returning a ModelSpec."""
    if ":" not in source:
        return zoo_model(source, size, fmt=fmt)
    factory: Callable[[], ModelSpec] = load_object(source)
    return EmbeddedModel(factory, fmt)
