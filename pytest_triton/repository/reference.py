"""Native PyTorch outputs: the ground truth every served variant is compared against."""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import SpecError
from pytest_triton.repository.spec import ModelSpec

Precision = str  # "fp32" or "fp16"


def _as_tuple(out: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, Mapping):
        return tuple(out.values())
    if isinstance(out, Sequence):
        return tuple(out)
    raise SpecError(f"forward() returned {type(out).__name__}; return tensors, a tuple or a dict")


_TF32_LOCK = threading.RLock()


@contextlib.contextmanager
def ieee_fp32() -> Iterator[None]:
    """TF32 off in cuBLAS matmuls and cuDNN convolutions/RNNs for the duration, restored
    after: the reference is fp32 as IEEE defines it, whatever the process set (cuDNN's own
    default allows TF32). torch >= 2.9 has per-backend fp32_precision settings, and reading
    the legacy allow_tf32 flags after they were used raises there, so the new API is used
    where it exists."""
    with _TF32_LOCK:
        cuda, cudnn = torch.backends.cuda, torch.backends.cudnn
        knobs: list[Any] = [
            k
            for k in (cuda.matmul, getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None))
            if hasattr(k, "fp32_precision")
        ]
        if knobs:
            saved = [k.fp32_precision for k in knobs]
            try:
                for knob in knobs:
                    knob.fp32_precision = "ieee"
                yield
            finally:
                for knob, value in zip(knobs, saved, strict=True):
                    knob.fp32_precision = value
            return
        legacy = (cuda.matmul.allow_tf32, cudnn.allow_tf32)
        try:
            cuda.matmul.allow_tf32 = cudnn.allow_tf32 = False
            yield
        finally:
            cuda.matmul.allow_tf32, cudnn.allow_tf32 = legacy


def _placed(module: torch.nn.Module, device: torch.device) -> bool:
    """Every parameter and buffer already on `device` (cuda matches any cuda:N)."""
    tensors = [*module.parameters(), *module.buffers()]
    return all(
        t.device.type == device.type and (device.index is None or t.device.index == device.index)
        for t in tensors
    )


class NativeModel:
    """Runs a spec's module in PyTorch, at fp32 or fp16, on CPU or CUDA, with TF32 off.

    The user's module is never moved or cast: another device or precision gets a copy, so
    CPU and CUDA references of one spec coexist (and the signature, read on the CPU, stays
    valid)."""

    def __init__(self, spec: ModelSpec, precision: Precision = "fp32", device: str = "cpu"):
        self.spec = spec
        self.precision = precision
        self.device = torch.device(device)
        module = spec.torch_module()
        if precision == "fp16" or not _placed(module, self.device):
            module = copy.deepcopy(module)
            if precision == "fp16":
                module = module.half()
            module = module.to(self.device)
        self.module = module

    def cast_inputs(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        """Inputs as the served variant receives them (floating inputs in half for fp16)."""
        if self.precision != "fp16":
            return dict(inputs)
        return {
            n: (a.astype(np.float16) if np.issubdtype(a.dtype, np.floating) else a)
            for n, a in inputs.items()
        }

    @torch.inference_mode()
    def __call__(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        cast = self.cast_inputs(inputs)
        args = [
            torch.from_numpy(np.ascontiguousarray(cast[n])).to(self.device)
            for n in self.spec.input_names
        ]
        with ieee_fp32():
            outs = _as_tuple(self.module(*args))
        names = self.spec.output_names
        if len(outs) != len(names):
            raise SpecError(
                f"model {self.spec.name!r}: forward() returned {len(outs)} output(s) but "
                f"{len(names)} are declared ({names})"
            )
        return {
            n: o.detach().float().cpu().numpy()
            if o.dtype == torch.bfloat16
            else o.detach().cpu().numpy()
            for n, o in zip(names, outs, strict=False)
        }
