"""Which served variants a repository holds: spec x format x precision, native or hosted.

Where the server has no native backend for a format, the variant is served by the python
backend loading the same artifact ("hosted"); its id says so, never pretending otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_triton.base.errors import ConfigError, SpecError
from pytest_triton.base.formats import CPU_FORMATS, GPU_FORMATS, PRECISIONS
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.repository.spec import ModelSpec

# format -> (Triton backend that serves it natively, platform string for config.pbtxt)
NATIVE_BACKEND: dict[str, tuple[str, str]] = {
    "torchscript-script": ("pytorch", "pytorch_libtorch"),
    "torchscript-trace": ("pytorch", "pytorch_libtorch"),
    "onnx": ("onnxruntime", "onnxruntime_onnx"),
    "onnx-trt": ("onnxruntime", "onnxruntime_onnx"),
    "tensorrt": ("tensorrt", "tensorrt_plan"),
    # Triton's PyTorch backend runs PyTorch 2 programs through a Python runtime of its own
    # that no server here reports as a backend: these are always python-hosted.
    "torch-export": ("pytorch2", ""),
    "aoti": ("pytorch2", ""),
}
KNOWN_FORMATS = CPU_FORMATS + GPU_FORMATS
ARTIFACT: dict[str, str] = {
    "torchscript-script": "model.pt",
    "torchscript-trace": "model.pt",
    "onnx": "model.onnx",
    "onnx-trt": "model.onnx",
    "tensorrt": "model.plan",
    "torch-export": "model.pt2",
    "aoti": "model.pt2",
}
INT8_FORMATS = frozenset({"onnx"})  # quantized by onnxruntime.quantization (exporters.py)
FP16_FORMATS = frozenset(
    {"torchscript-trace", "torchscript-script", "onnx", "onnx-trt", "tensorrt"}
)


@dataclass(frozen=True)
class Variant:
    """One model directory of the repository."""

    spec: ModelSpec
    format: str
    precision: str  # "fp32" | "fp16" | "int8"
    hosted: bool
    instance_kind: str = "KIND_CPU"
    warmup: int = 0  # Triton model_warmup runs per sample before the model serves
    deployed: bool = False  # served by someone else under the spec's own name
    name_suffix: str = ""  # a pytest-xdist worker's own names on a shared server ("_gw0")

    @property
    def gpu(self) -> bool:
        """Whether its instances run on a GPU (then so does its PyTorch reference)."""
        return self.instance_kind == "KIND_GPU"

    @property
    def backend(self) -> str:
        return "python" if self.hosted else NATIVE_BACKEND[self.format][0]

    @property
    def model_name(self) -> str:
        if self.deployed:
            return self.spec.triton_name or self.spec.name
        if self.spec.triton_name:
            return self.spec.triton_name + self.name_suffix
        suffix = f"_{self.precision}" if self.precision != "fp32" else ""
        return f"{self.spec.name}_{self.format.replace('-', '_')}{suffix}{self.name_suffix}"

    @property
    def id(self) -> str:
        """Test id: model, format, precision, who serves it and, on a GPU, where, e.g.
        mnist-onnx-hosted or resnet50-torchscript-trace-fp16-native-gpu."""
        if self.deployed:
            return f"{self.spec.name}-{self.format}-deployed"
        return variant_id(self.spec.name, self.format, self.precision, self.hosted, self.gpu)

    @property
    def artifact(self) -> str:
        return ARTIFACT[self.format]


def variant_id(model: str, fmt: str, precision: str, hosted: bool | None, gpu: bool = False) -> str:
    prec = f"-{precision}" if precision != "fp32" else ""
    served = "" if hosted is None else ("-hosted" if hosted else "-native")
    return f"{model}-{fmt}{prec}{served}{'-gpu' if gpu else ''}"


@dataclass(frozen=True)
class Unavailable:
    """A variant this server cannot serve, kept so tests show it as skipped, with the reason."""

    id: str
    reason: str


@dataclass(frozen=True)
class Plan:
    variants: list[Variant]
    unavailable: list[Unavailable]


def _problem(fmt: str, target: ServerTarget, kind: str) -> str | None:
    """Why `fmt` cannot be served by this target on `kind` instances, or None."""
    native = NATIVE_BACKEND[fmt][0] in target.backends
    if fmt == "tensorrt":
        return (
            None
            if native and target.tensorrt_problem is None
            else (target.tensorrt_problem or "the server has no tensorrt backend")
        )
    if fmt == "onnx-trt" and not (native and target.gpu):
        return "ONNX Runtime's TensorRT execution accelerator needs a GPU server with the " + (
            "onnxruntime backend, which this one lacks (an NGC image has it)"
            if target.gpu
            else "onnxruntime backend: run with --triton-gpu"
        )
    if not native and "python" not in target.backends:
        return (
            f"the server has neither the {NATIVE_BACKEND[fmt][0]} backend nor the python "
            "backend to host the artifact"
        )
    if not native and fmt == "onnx" and kind == "KIND_GPU" and target.onnx_gpu_problem:
        return target.onnx_gpu_problem  # offered on the GPU or not at all, never on the CPU
    return None


LOAD_FORMATS: tuple[str, ...] = ("onnx", "torchscript-trace", "torchscript-script")
"""What a load test serves when no format is named, in order of preference: the first one the
server can serve on its device (on a GPU without onnxruntime's CUDA provider, TorchScript)."""


def format_problem(fmt: str, target: ServerTarget) -> str | None:
    """Why this server cannot serve `fmt` on its own instances (its device), or None."""
    if fmt not in NATIVE_BACKEND:
        return f"unknown export format {fmt!r}; choose from {', '.join(KNOWN_FORMATS)}"
    return _problem(fmt, target, target.instance_kind)


def _device(target: ServerTarget) -> str:
    return "GPU" if target.gpu else "CPU"


def check_servable(fmt: str, target: ServerTarget) -> str:
    """`fmt`, named by the user: refused with the reason when this server cannot serve it."""
    problem = format_problem(fmt, target)
    if problem is not None:
        ok = [f for f in KNOWN_FORMATS if format_problem(f, target) is None]
        raise ConfigError(
            f"export format {fmt!r} cannot be served by this server on its {_device(target)}: "
            f"{problem}; it can serve {', '.join(ok) or 'none of them'}"
        )
    return fmt


def default_format(target: ServerTarget, preferred: Sequence[str] = LOAD_FORMATS) -> str:
    """The first of `preferred` this server can serve on its device; none: every reason."""
    problems = {fmt: format_problem(fmt, target) for fmt in preferred}
    for fmt, problem in problems.items():
        if problem is None:
            return fmt
    reasons = "; ".join(f"{fmt}: {problem}" for fmt, problem in problems.items())
    raise ConfigError(
        f"this server can serve none of {', '.join(preferred)} on its {_device(target)}: {reasons}"
    )


def precisions_of(spec: ModelSpec, fmt: str, precisions: Sequence[str] | None) -> list[str]:
    """The precisions a spec is served at in `fmt`: those asked for (fp16 only where the
    format has it), else fp32 plus fp16 when the spec asks for it."""
    wanted = precisions or [
        "fp32",
        *(["fp16"] if spec.fp16 else []),
        *(["int8"] if spec.int8 else []),
    ]
    return [
        p
        for p in PRECISIONS
        if p in wanted
        and (
            p == "fp32"
            or (p == "fp16" and fmt in FP16_FORMATS)
            or (p == "int8" and fmt in INT8_FORMATS)
        )
    ]


def plan_variants(
    specs: Iterable[ModelSpec],
    formats: Sequence[str],
    target: ServerTarget,
    *,
    precisions: Sequence[str] | None = None,
    warmup: int | None = None,
) -> Plan:
    """Validate every spec, then list the variants the given server can serve (and those it
    cannot, with the reason). `warmup` None: DEFAULT_GPU_WARMUP on a GPU server, else none;
    a spec's own warmup wins."""
    variants: list[Variant] = []
    unavailable: list[Unavailable] = []
    seen: set[str] = set()
    for spec in specs:
        spec.validate()
        if spec.name in seen:
            raise SpecError(f"two specs are named {spec.name!r}; model names must be unique")
        seen.add(spec.name)
        kind = spec.instance_group.kind or target.instance_kind
        if target.deployed:
            variants.append(deployed_variant(spec, formats, target, kind, precisions))
            continue
        for fmt in spec.formats or formats:
            if fmt not in NATIVE_BACKEND:
                raise SpecError(
                    f"unknown export format {fmt!r}; choose from {', '.join(KNOWN_FORMATS)}"
                )
            problem = _problem(fmt, target, kind)
            native = NATIVE_BACKEND[fmt][0] in target.backends
            runs = warmup_runs(spec, target, warmup)
            for precision in precisions_of(spec, fmt, precisions):
                if problem:
                    unavailable.append(
                        Unavailable(
                            variant_id(spec.name, fmt, precision, None, kind == "KIND_GPU"), problem
                        )
                    )
                else:
                    variants.append(
                        Variant(
                            spec,
                            fmt,
                            precision,
                            not native,
                            kind,
                            runs,
                            name_suffix=target.name_suffix,
                        )
                    )
    return Plan(variants, unavailable)


def deployed_variant(
    spec: ModelSpec,
    formats: Sequence[str],
    target: ServerTarget,
    kind: str,
    precisions: Sequence[str] | None,
) -> Variant:
    """The one variant a deployed server serves for a spec: its format is the user's to say
    (the reference's tolerances depend on it), its precision the first asked for."""
    declared = list(spec.formats or formats)
    if len(declared) != 1:
        raise SpecError(
            f"model {spec.name!r}: a deployed server serves one format under the name "
            f"{spec.triton_name or spec.name!r}; say which with ModelSpec(formats=['onnx']) or "
            f"--triton-formats onnx (asked for: {', '.join(declared) or 'none'})"
        )
    fmt = declared[0]
    if fmt not in NATIVE_BACKEND:
        raise SpecError(f"unknown export format {fmt!r}; choose from {', '.join(KNOWN_FORMATS)}")
    precision = precisions_of(spec, fmt, precisions)[0]
    native = NATIVE_BACKEND[fmt][0] in target.backends
    return Variant(spec, fmt, precision, not native, kind, 0, deployed=True)


DEFAULT_GPU_WARMUP = 5
"""Warm-up runs per sample on GPU servers: TorchScript's profiling executor re-optimizes after
its first runs (on an H100, fp16 answers were identical for two requests, then moved by up to
9.8e-4), so parity is checked on what production serves after warm-up; 5 leaves headroom."""


def warmup_runs(spec: ModelSpec, target: ServerTarget, warmup: int | None) -> int:
    if spec.warmup is not None:
        return spec.warmup
    if warmup is not None:
        return warmup
    return DEFAULT_GPU_WARMUP if target.gpu else 0
