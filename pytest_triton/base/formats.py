"""Export formats, by where they can be served."""

from __future__ import annotations

FORMATS: tuple[str, ...] = ("torchscript-script", "torchscript-trace", "onnx")
"""Export formats a CPU server serves by default (every test of the zoo runs in each)."""

PT2_FORMATS: tuple[str, ...] = ("torch-export", "aoti")
"""PyTorch 2's deployment formats: an ExportedProgram (torch.export.save) and an AOTInductor
package of compiled kernels, both .pt2, python-hosted. A CPU server serves them too, but only
where asked (--triton-formats, ModelSpec(formats=...)): an AOTInductor compile of one small
zoo model takes tens of seconds of a small CPU, the whole zoo would take minutes."""

CPU_FORMATS: tuple[str, ...] = FORMATS + PT2_FORMATS
"""Every format a CPU server can serve."""

GPU_FORMATS: tuple[str, ...] = ("tensorrt", "onnx-trt")
"""Formats that need a GPU server (added to the default set in GPU mode)."""

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
"""Precisions a variant may be served at (fp16 where the format supports it; int8 as an ONNX
model quantized by onnxruntime.quantization, judged by accuracy rather than element-wise)."""

REDUCED_PRECISIONS: frozenset[str] = frozenset({"int8"})
"""Precisions whose answers differ from fp32 PyTorch's by design: element-wise parity does
not judge them, an accuracy check on a dataset does (pytest_triton/accuracy/)."""
