"""Parity between native PyTorch and served outputs, with messages that say where it broke."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import tensor_type


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    reason: str = ""


# torch.testing.assert_close's per-dtype defaults; integer and bool outputs must match exactly.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "FP16": Tolerance(1e-3, 1e-5, "torch.testing default for float16"),
    "BF16": Tolerance(1.6e-2, 1e-5, "torch.testing default for bfloat16"),
    "FP32": Tolerance(1.3e-6, 1e-5, "torch.testing default for float32"),
    "FP64": Tolerance(1e-7, 1e-7, "torch.testing default for float64"),
}
EXACT = Tolerance(0.0, 0.0, "integer and bool outputs must be identical")

# Widened per (format, wire dtype), each with the reason the served numbers may move.
# CPU fp32 needs no widening: over the zoo's small models (8-row batches, and single rows
# served inside dynamic batches) the worst served-vs-PyTorch difference measured on this
# project's machine was 5.4e-7 absolute for TorchScript and ONNX Runtime alike, 5% of the
# default allowance.
BACKEND_TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("onnx", "FP16"): Tolerance(
        5e-3, 1e-3, "ONNX Runtime fp16 kernels accumulate in fp16 where ATen may use fp32"),
    # GPU variants (--triton-gpu). Not yet measured in CI, which has no GPU: set from each
    # library's documented precision, to be tightened with figures from a GPU run.
    ("torchscript-script", "FP16"): Tolerance(
        1e-2, 1e-3, "fp16 keeps 10 mantissa bits and cuBLAS picks other kernels per batch size"),
    ("torchscript-trace", "FP16"): Tolerance(
        1e-2, 1e-3, "fp16 keeps 10 mantissa bits and cuBLAS picks other kernels per batch size"),
    ("tensorrt", "FP32"): Tolerance(
        1e-3, 1e-4, "TensorRT may pick TF32 tactics (10-bit mantissa) on Ampere and newer"),
    ("tensorrt", "FP16"): Tolerance(
        2e-2, 2e-3, "TensorRT fuses layers and chooses its own fp16 tactics"),
    ("onnx-trt", "FP32"): Tolerance(
        2e-2, 2e-3, "an fp32 graph that ONNX Runtime's TensorRT provider computes in fp16 "
        "(precision_mode FP16)"),
}


def tolerance_for(fmt: str, dtype: object) -> Tolerance:
    wire = tensor_type(dtype).wire
    if (fmt, wire) in BACKEND_TOLERANCES:
        return BACKEND_TOLERANCES[(fmt, wire)]
    return DEFAULT_TOLERANCES.get(wire, EXACT)


@dataclass(frozen=True)
class OutputDiff:
    """How one output tensor compares; `ok` when every element is within tolerance."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    tolerance: Tolerance
    max_abs: float
    max_rel: float
    mismatched: int
    total: int
    worst_index: tuple[int, ...] | None
    served_value: object
    native_value: object
    problem: str = ""  # shape/dtype/missing problems, found before any value comparison
    # The largest share of its allowance any element used: |served - native| / (atol + rtol *
    # |native|), torch.testing's allowance. Above 1 the element mismatches; inf where nothing
    # could be compared, or where an exact output differs.
    headroom_used: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problem and self.mismatched == 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly figures of this comparison (non-finite numbers become None)."""
        return {
            "name": self.name, "dtype": self.dtype, "shape": list(self.shape),
            "rtol": self.tolerance.rtol, "atol": self.tolerance.atol,
            "tolerance_reason": self.tolerance.reason,
            "max_abs": finite_or_none(self.max_abs), "max_rel": finite_or_none(self.max_rel),
            "headroom_used": finite_or_none(self.headroom_used),
            "mismatched": self.mismatched, "total": self.total, "ok": self.ok,
            "problem": self.problem,
        }

    def describe(self) -> str:
        if self.problem:
            return f"output {self.name!r}: {self.problem}"
        tol = self.tolerance
        text = (
            f"output {self.name!r} dtype {self.dtype}: max abs diff {self.max_abs:.3g}, "
            f"max rel diff {self.max_rel:.3g}, mismatched {self.mismatched} / {self.total} "
            f"({100.0 * self.mismatched / max(self.total, 1):.2f}%)"
        )
        if self.worst_index is not None:
            text += (f", worst at index {self.worst_index}: served {self.served_value!r} vs "
                     f"native {self.native_value!r}")
        return text + f" (rtol {tol.rtol:g}, atol {tol.atol:g})"


def compare_output(name: str, native: np.ndarray, served: np.ndarray | None,
                   tolerance: Tolerance) -> OutputDiff:
    def problem(text: str) -> OutputDiff:
        return OutputDiff(name, str(native.dtype), tuple(native.shape), tolerance, 0.0, 0.0, 0,
                          int(native.size), None, None, None, text, math.inf)

    if served is None:
        return problem("missing from the served response")
    if served.shape != native.shape:
        return problem(f"served shape {served.shape} != native shape {native.shape}")
    if tensor_type(native.dtype).wire == "BYTES":
        return _compare_bytes(name, native, served)
    if served.dtype != native.dtype:
        return problem(f"served dtype {served.dtype} != native dtype {native.dtype}")
    a = served.astype(np.float64)
    b = native.astype(np.float64)
    diff = np.abs(a - b)
    nan_mismatch = np.isnan(a) != np.isnan(b)
    diff = np.where(np.isnan(a) & np.isnan(b), 0.0, diff)
    bad = (diff > tolerance.atol + tolerance.rtol * np.abs(b)) | nan_mismatch
    bad |= np.isnan(diff)
    allowance = tolerance.atol + tolerance.rtol * np.abs(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(diff == 0, 0.0, diff / np.abs(b))
        used = np.where(diff == 0, 0.0, diff / allowance)
    used = np.where(nan_mismatch | np.isnan(diff), np.inf, used)
    worst = None
    served_value = native_value = None
    if native.size:
        score = np.where(bad, np.nan_to_num(diff, nan=np.inf), -1.0) if bad.any() else diff
        flat = int(np.argmax(score))
        worst = tuple(int(i) for i in np.unravel_index(flat, native.shape))
        served_value = served[worst].item()
        native_value = native[worst].item()
    return OutputDiff(
        name, tensor_type(native.dtype).wire, tuple(native.shape), tolerance,
        float(np.nanmax(diff)) if diff.size else 0.0,
        float(np.nanmax(rel)) if rel.size else 0.0,
        int(bad.sum()), int(native.size), worst, served_value, native_value,
        headroom_used=float(np.max(used)) if used.size else 0.0)


def _compare_bytes(name: str, native: np.ndarray, served: np.ndarray) -> OutputDiff:
    """BYTES tensors (numpy object or bytes arrays) must be identical, element by element."""
    bad = np.array([a != b for a, b in zip(served.ravel(), native.ravel(), strict=True)],
                   dtype=bool).reshape(native.shape)
    worst = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else None
    return OutputDiff(name, "BYTES", tuple(native.shape), EXACT, 0.0, 0.0, int(bad.sum()),
                      int(native.size), worst, served[worst] if worst else None,
                      native[worst] if worst else None,
                      headroom_used=math.inf if bad.any() else 0.0)


def finite_or_none(value: float) -> float | None:
    """JSON has no infinity: a figure that could not be measured is None."""
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class ParityReport:
    context: str
    diffs: tuple[OutputDiff, ...]

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.diffs)

    @property
    def headroom_used(self) -> float:
        """The worst output's share of its allowance (see OutputDiff.headroom_used)."""
        return max((d.headroom_used for d in self.diffs), default=0.0)

    def describe(self) -> str:
        lines = [f"parity {'ok' if self.ok else 'FAILED'}: {self.context}"]
        lines += [("  ok     " if d.ok else "  FAILED ") + d.describe() for d in self.diffs]
        return "\n".join(lines)


def compare(native: Mapping[str, np.ndarray], served: Mapping[str, np.ndarray], *,
            fmt: str = "", context: str = "", rtol: float | None = None,
            atol: float | None = None,
            tolerances: Mapping[str, Tolerance] | None = None) -> ParityReport:
    """Compare every native output with its served twin.

    Tolerance per output: `tolerances[name]`, else explicit rtol/atol, else the backend's
    widened value for (fmt, dtype), else torch.testing's default for the dtype.
    """
    diffs = []
    for name, expected in native.items():
        tol = (tolerances or {}).get(name) or tolerance_for(fmt, expected.dtype)
        if rtol is not None or atol is not None:
            tol = Tolerance(tol.rtol if rtol is None else rtol, tol.atol if atol is None else atol,
                            "given by the caller")
        diffs.append(compare_output(name, expected, served.get(name), tol))
    return ParityReport(context, tuple(diffs))


def assert_parity(native: Mapping[str, np.ndarray], served: Mapping[str, np.ndarray], *,
                  model: str = "?", backend: str = "?", protocol: str = "?",
                  fmt: str | None = None, rtol: float | None = None, atol: float | None = None,
                  tolerances: Mapping[str, Tolerance] | None = None) -> ParityReport:
    """Raise AssertionError naming model, backend, protocol and each failing output."""
    context = f"model {model!r}, backend {backend!r}, protocol {protocol!r}"
    report = compare(native, served, fmt=fmt if fmt is not None else backend, context=context,
                     rtol=rtol, atol=atol, tolerances=tolerances)
    if not report.ok:
        raise AssertionError(report.describe())
    return report
