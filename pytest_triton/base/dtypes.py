"""One table of tensor types: torch dtype <-> numpy dtype <-> Triton wire / config names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import torch

from pytest_triton.base.errors import SpecError

Array: TypeAlias = npt.NDArray[Any]
"""A tensor as numpy holds it: any element type (the dtype tables below say which)."""


@dataclass(frozen=True)
class TensorType:
    """A tensor element type as every layer names it."""

    torch: torch.dtype | None  # None for BYTES: PyTorch has no string tensors
    numpy: np.dtype[Any]
    wire: str  # the KServe v2 datatype ("FP32"), used by tritonclient

    @property
    def config(self) -> str:
        """The model_config_pb2.DataType name written into config.pbtxt."""
        return "TYPE_STRING" if self.wire == "BYTES" else f"TYPE_{self.wire}"


def _t(dtype: torch.dtype, wire: str) -> TensorType:
    return TensorType(dtype, np.dtype(torch.empty(0, dtype=dtype).numpy().dtype), wire)


TYPES: tuple[TensorType, ...] = (
    _t(torch.bool, "BOOL"),
    _t(torch.uint8, "UINT8"),
    _t(torch.int8, "INT8"),
    _t(torch.int16, "INT16"),
    _t(torch.int32, "INT32"),
    _t(torch.int64, "INT64"),
    _t(torch.float16, "FP16"),
    _t(torch.float32, "FP32"),
    _t(torch.float64, "FP64"),
    TensorType(None, np.dtype(object), "BYTES"),
)
BYTES = TYPES[-1]

_BY_KEY: dict[object, TensorType] = {}
for _tt in TYPES:
    for _key in (_tt.torch, _tt.numpy, _tt.wire, _tt.config, _tt.numpy.name, str(_tt.torch)):
        if _key is not None and _key != "None":
            _BY_KEY.setdefault(_key, _tt)
_BY_KEY.update({"float": TYPES[7], "float32": TYPES[7], "half": TYPES[6], "long": TYPES[5]})


def tensor_type(dtype: object) -> TensorType:
    """Look a dtype up by any of its names; unknown names fail with the list of known ones."""
    key = dtype
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        key = np.dtype(dtype)
    if isinstance(key, np.dtype) and key.kind in "OSU":  # Python objects, bytes or str arrays
        return BYTES
    found = _BY_KEY.get(key) if not isinstance(key, str) else _BY_KEY.get(key.strip())
    if found is None:
        known = ", ".join(t.wire for t in TYPES)
        raise SpecError(
            f"unknown dtype {dtype!r}: use a torch dtype, a numpy dtype or one of {known}"
        )
    return found
