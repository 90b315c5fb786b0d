"""Which served variants a repository holds: spec x format x precision, native or hosted.

Where the server has no native backend for a format, the variant is served by the python
backend loading the same artifact ("hosted"); its id says so, never pretending otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import SpecError
from ..formats import FORMATS, GPU_FORMATS
from ..target import ServerTarget
from .spec import ModelSpec

# format -> (Triton backend that serves it natively, platform string for config.pbtxt)
NATIVE_BACKEND: dict[str, tuple[str, str]] = {
    "torchscript-script": ("pytorch", "pytorch_libtorch"),
    "torchscript-trace": ("pytorch", "pytorch_libtorch"),
    "onnx": ("onnxruntime", "onnxruntime_onnx"),
    "onnx-trt": ("onnxruntime", "onnxruntime_onnx"),
    "tensorrt": ("tensorrt", "tensorrt_plan"),
}
ARTIFACT: dict[str, str] = {
    "torchscript-script": "model.pt",
    "torchscript-trace": "model.pt",
    "onnx": "model.onnx",
    "onnx-trt": "model.onnx",
    "tensorrt": "model.plan",
}
FP16_FORMATS = frozenset({"torchscript-trace", "torchscript-script", "onnx", "onnx-trt",
                          "tensorrt"})


@dataclass(frozen=True)
class Variant:
    """One model directory of the repository."""

    spec: ModelSpec
    format: str
    precision: str  # "fp32" | "fp16"
    hosted: bool
    instance_kind: str = "KIND_CPU"

    @property
    def backend(self) -> str:
        return "python" if self.hosted else NATIVE_BACKEND[self.format][0]

    @property
    def model_name(self) -> str:
        if self.spec.triton_name:
            return self.spec.triton_name
        suffix = "_fp16" if self.precision == "fp16" else ""
        return f"{self.spec.name}_{self.format.replace('-', '_')}{suffix}"

    @property
    def id(self) -> str:
        """Test id: model, format, precision and who serves it, e.g. mnist-onnx-hosted."""
        return variant_id(self.spec.name, self.format, self.precision, self.hosted)

    @property
    def artifact(self) -> str:
        return ARTIFACT[self.format]


def variant_id(model: str, fmt: str, precision: str, hosted: bool | None) -> str:
    prec = "-fp16" if precision == "fp16" else ""
    served = "" if hosted is None else ("-hosted" if hosted else "-native")
    return f"{model}-{fmt}{prec}{served}"


@dataclass(frozen=True)
class Unavailable:
    """A variant this server cannot serve, kept so tests show it as skipped, with the reason."""

    id: str
    reason: str


@dataclass(frozen=True)
class Plan:
    variants: list[Variant]
    unavailable: list[Unavailable]


def _problem(fmt: str, target: ServerTarget) -> str | None:
    """Why `fmt` cannot be served by this target, or None."""
    native = NATIVE_BACKEND[fmt][0] in target.backends
    if fmt == "tensorrt":
        return None if native and target.tensorrt_problem is None else (
            target.tensorrt_problem or "the server has no tensorrt backend")
    if fmt == "onnx-trt" and not (native and target.gpu):
        return ("ONNX Runtime's TensorRT execution accelerator needs a GPU server with the "
                "onnxruntime backend: run with --triton-gpu")
    if not native and "python" not in target.backends:
        return (f"the server has neither the {NATIVE_BACKEND[fmt][0]} backend nor the python "
                "backend to host the artifact")
    return None


def plan_variants(specs: Iterable[ModelSpec], formats: Sequence[str],
                  target: ServerTarget) -> Plan:
    """Validate every spec, then list the variants the given server can serve (and those it
    cannot, with the reason)."""
    variants: list[Variant] = []
    unavailable: list[Unavailable] = []
    seen: set[str] = set()
    for spec in specs:
        spec.validate()
        if spec.name in seen:
            raise SpecError(f"two specs are named {spec.name!r}; model names must be unique")
        seen.add(spec.name)
        kind = spec.instance_group.kind or target.instance_kind
        for fmt in spec.formats or formats:
            if fmt not in NATIVE_BACKEND:
                raise SpecError(
                    f"unknown export format {fmt!r}; choose from "
                    f"{', '.join(FORMATS + GPU_FORMATS)}"
                )
            precisions = ["fp32"] + (["fp16"] if spec.fp16 and fmt in FP16_FORMATS else [])
            problem = _problem(fmt, target)
            native = NATIVE_BACKEND[fmt][0] in target.backends
            for precision in precisions:
                if problem:
                    unavailable.append(Unavailable(variant_id(spec.name, fmt, precision, None),
                                                   problem))
                else:
                    variants.append(Variant(spec, fmt, precision, not native, kind))
    return Plan(variants, unavailable)
