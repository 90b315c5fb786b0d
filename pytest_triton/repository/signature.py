"""The served signature of a spec: each tensor's Triton type and dims, checked against PyTorch.

Output types and shapes are read off one native forward pass, so users declare names only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pytest_triton.base.dtypes import TensorType, tensor_type
from pytest_triton.base.errors import SpecError
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.spec import ModelSpec


@dataclass(frozen=True)
class ServedTensor:
    name: str
    type: TensorType
    dims: tuple[int, ...]  # without the batch axis; -1 = dynamic


@dataclass(frozen=True)
class Signature:
    inputs: tuple[ServedTensor, ...]
    outputs: tuple[ServedTensor, ...]

    def with_precision(self, precision: str) -> Signature:
        """fp16 variants take and return half wherever the fp32 model uses float32."""
        if precision != "fp16":
            return self
        half = tensor_type(torch.float16)

        def cast(t: ServedTensor) -> ServedTensor:
            return ServedTensor(t.name, half, t.dims) if t.type.wire == "FP32" else t

        return Signature(tuple(map(cast, self.inputs)), tuple(map(cast, self.outputs)))


def resolve_signature(spec: ModelSpec) -> Signature:
    """Types and dims of every input and output, from the examples and a native forward pass."""
    examples = spec.example_tensors()
    skip = 1 if spec.batched else 0
    inputs = []
    for ts in spec.input_specs:
        tensor = examples[ts.name]
        dims = list(tensor.shape[skip:])
        for axis in spec.dynamic_axes.get(ts.name, ()):
            if not 0 <= axis - skip < len(dims):
                raise SpecError(
                    f"model {spec.name!r}: dynamic axis {axis} of input {ts.name!r} is out of "
                    f"range for shape {tuple(tensor.shape)}"
                )
            dims[axis - skip] = -1
        if ts.dims is not None:
            dims = list(ts.dims)
        inputs.append(ServedTensor(ts.name, tensor_type(tensor.dtype), tuple(dims)))

    native = NativeModel(spec)
    example_np = {n: t.detach().cpu().numpy() for n, t in examples.items()}
    first = native(example_np)
    changed: dict[str, set[int]] = {n: set() for n in first}
    if spec.dynamic_axes:
        # Shrink every dynamic axis by one; output axes whose size follows are dynamic too.
        shrunk = dict(example_np)
        for name, axes in spec.dynamic_axes.items():
            arr = shrunk[name]
            for axis in axes:
                if arr.shape[axis] > 1:
                    arr = np.take(arr, range(arr.shape[axis] - 1), axis=axis)
            shrunk[name] = arr
        second = native(shrunk)
        for name in first:
            a, b = first[name].shape, second[name].shape
            changed[name] = {i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y}

    outputs = []
    for ts in spec.output_specs:
        arr = first[ts.name]
        batch = next(iter(examples.values())).shape[0]
        if spec.batched and (arr.ndim == 0 or arr.shape[0] != batch):
            raise SpecError(
                f"model {spec.name!r}: output {ts.name!r} has shape {arr.shape}, whose first "
                "axis is not the batch axis; Triton batching needs outputs batched like inputs"
            )
        dims = [(-1 if i in changed[ts.name] else s) for i, s in enumerate(arr.shape)][skip:]
        if ts.dims is not None:
            dims = list(ts.dims)
        declared = spec.declared_type(ts.name)
        actual = tensor_type(arr.dtype)
        if declared is not None and declared != actual:
            raise SpecError(
                f"model {spec.name!r}: output {ts.name!r} is declared {declared.wire} but "
                f"forward() returns {actual.wire}"
            )
        outputs.append(ServedTensor(ts.name, actual, tuple(dims)))
    return Signature(tuple(inputs), tuple(outputs))
