"""Native PyTorch outputs: the ground truth every served variant is compared against."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .errors import SpecError
from .repository.spec import ModelSpec

Precision = str  # "fp32" or "fp16"


def _as_tuple(out: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, Mapping):
        return tuple(out.values())
    if isinstance(out, Sequence):
        return tuple(out)
    raise SpecError(f"forward() returned {type(out).__name__}; return tensors, a tuple or a dict")


class NativeModel:
    """Runs a spec's module in PyTorch, at fp32 or fp16, on CPU or CUDA."""

    def __init__(self, spec: ModelSpec, precision: Precision = "fp32", device: str = "cpu"):
        self.spec = spec
        self.precision = precision
        self.device = torch.device(device)
        module = spec.torch_module()
        if precision == "fp16":
            module = copy.deepcopy(module).half()
        self.module = module.to(self.device)

    def cast_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Inputs as the served variant receives them (floating inputs in half for fp16)."""
        if self.precision != "fp16":
            return dict(inputs)
        return {n: (a.astype(np.float16) if np.issubdtype(a.dtype, np.floating) else a)
                for n, a in inputs.items()}

    @torch.inference_mode()
    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cast = self.cast_inputs(inputs)
        args = [torch.from_numpy(np.ascontiguousarray(cast[n])).to(self.device)
                for n in self.spec.input_names]
        outs = _as_tuple(self.module(*args))
        names = self.spec.output_names
        if len(outs) != len(names):
            raise SpecError(
                f"model {self.spec.name!r}: forward() returned {len(outs)} output(s) but "
                f"{len(names)} are declared ({names})"
            )
        return {n: o.detach().float().cpu().numpy() if o.dtype == torch.bfloat16
                else o.detach().cpu().numpy() for n, o in zip(names, outs, strict=False)}
