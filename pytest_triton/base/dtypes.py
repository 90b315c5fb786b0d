"""One table of tensor types: torch dtype <-> numpy dtype <-> Triton wire / config names.

torch is imported only when a torch dtype is asked for: clients, load generators and Locust
processes that never touch a module use this table without paying torch's import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt

from pytest_triton.base.errors import SpecError

if TYPE_CHECKING:
    import torch

Array: TypeAlias = npt.NDArray[Any]
"""A tensor as numpy holds it: any element type (the dtype tables below say which)."""


@dataclass(frozen=True)
class TensorType:
    """A tensor element type as every layer names it."""

    torch_name: str | None  # "float32" for torch.float32; None for BYTES (no string tensors)
    numpy: np.dtype[Any]
    wire: str  # the KServe v2 datatype ("FP32"), used by tritonclient

    @property
    def torch(self) -> torch.dtype | None:
        """The torch dtype (imports torch: only callers that hold tensors ask)."""
        if self.torch_name is None:
            return None
        import torch

        dtype: torch.dtype = getattr(torch, self.torch_name)
        return dtype

    @property
    def config(self) -> str:
        """The model_config_pb2.DataType name written into config.pbtxt."""
        return "TYPE_STRING" if self.wire == "BYTES" else f"TYPE_{self.wire}"


def _t(name: str, wire: str) -> TensorType:
    # torch and numpy share these element type names
    return TensorType(name, np.dtype(name), wire)


TYPES: tuple[TensorType, ...] = (
    _t("bool", "BOOL"),
    _t("uint8", "UINT8"),
    _t("int8", "INT8"),
    _t("int16", "INT16"),
    _t("int32", "INT32"),
    _t("int64", "INT64"),
    _t("float16", "FP16"),
    _t("float32", "FP32"),
    _t("float64", "FP64"),
    TensorType(None, np.dtype(object), "BYTES"),
)
BYTES = TYPES[-1]

_BY_KEY: dict[object, TensorType] = {}
for _tt in TYPES:
    torch_key = [f"torch.{_tt.torch_name}"] if _tt.torch_name else []
    for _key in (_tt.numpy, _tt.wire, _tt.config, _tt.numpy.name, *torch_key):
        _BY_KEY.setdefault(_key, _tt)
_BY_KEY.update({"float": TYPES[7], "float32": TYPES[7], "half": TYPES[6], "long": TYPES[5]})


def tensor_type(dtype: object) -> TensorType:
    """Look a dtype up by any of its names; unknown names fail with the list of known ones."""
    key = dtype
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        key = np.dtype(dtype)
    if isinstance(key, np.dtype) and key.kind in "OSU":  # Python objects, bytes or str arrays
        return BYTES
    if type(key).__module__ == "torch":  # a torch.dtype, looked up by its name
        key = str(key)
    found = _BY_KEY.get(key) if not isinstance(key, str) else _BY_KEY.get(key.strip())
    if found is None:
        known = ", ".join(t.wire for t in TYPES)
        raise SpecError(
            f"unknown dtype {dtype!r}: use a torch dtype, a numpy dtype or one of {known}"
        )
    return found
