"""BYTES tensors under load: object arrays of bytes to a python model that upper-cases them."""

from typing import Any

import numpy as np

from pytest_triton.load.users import TritonUser


def texts(batch_size: int, seed: int) -> dict[str, Any]:
    rows = [[f"request {seed} row {i}".encode(), b"\x00raw"] for i in range(batch_size)]
    return {"TEXT": np.array(rows, dtype=object)}


class BytesUser(TritonUser):
    model = "echo_bytes"
    inputs = texts
    batch_size = 4
