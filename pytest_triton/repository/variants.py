"""Which served variants a repository holds: spec x format x precision, native or hosted.

Where the server has no native backend for a format, the variant is served by the python
backend loading the same artifact ("hosted"); its id says so, never pretending otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import SpecError
from .spec import FORMATS, GPU_FORMATS, ModelSpec

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
# Formats the python backend can host here (TensorRT plans need the GPU server).
HOSTABLE = frozenset(FORMATS)
FP16_FORMATS = frozenset({"torchscript-trace", "torchscript-script", "onnx", "onnx-trt",
                          "tensorrt"})


@dataclass(frozen=True)
class Variant:
    """One model directory of the repository."""

    spec: ModelSpec
    format: str
    precision: str  # "fp32" | "fp16"
    hosted: bool

    @property
    def backend(self) -> str:
        return "python" if self.hosted else NATIVE_BACKEND[self.format][0]

    @property
    def model_name(self) -> str:
        suffix = "_fp16" if self.precision == "fp16" else ""
        return f"{self.spec.name}_{self.format.replace('-', '_')}{suffix}"

    @property
    def id(self) -> str:
        """Test id: model, format, precision and who serves it, e.g. mnist-onnx-hosted."""
        prec = "-fp16" if self.precision == "fp16" else ""
        return f"{self.spec.name}-{self.format}{prec}-{'hosted' if self.hosted else 'native'}"

    @property
    def artifact(self) -> str:
        return ARTIFACT[self.format]


def plan_variants(
    specs: Iterable[ModelSpec],
    formats: Sequence[str],
    server_backends: Iterable[str],
) -> list[Variant]:
    """Validate every spec, then list the variants the given server can serve."""
    backends = frozenset(server_backends)
    variants: list[Variant] = []
    seen: set[str] = set()
    for spec in specs:
        spec.validate()
        if spec.name in seen:
            raise SpecError(f"two specs are named {spec.name!r}; model names must be unique")
        seen.add(spec.name)
        for fmt in spec.formats or formats:
            if fmt not in NATIVE_BACKEND:
                raise SpecError(
                    f"unknown export format {fmt!r}; choose from "
                    f"{', '.join(FORMATS + GPU_FORMATS)}"
                )
            native = NATIVE_BACKEND[fmt][0] in backends
            if not native and fmt not in HOSTABLE:
                continue  # e.g. tensorrt on a CPU-only server: nothing could serve it
            if not native and "python" not in backends:
                continue
            precisions = ["fp32"] + (["fp16"] if spec.fp16 and fmt in FP16_FORMATS else [])
            variants.extend(Variant(spec, fmt, p, hosted=not native) for p in precisions)
    return variants
