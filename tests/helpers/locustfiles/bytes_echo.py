"""BYTES tensors under load to a python model that upper-cases them: object arrays of bytes,
and numpy str arrays (every user cycles through both)."""

from typing import Any

import numpy as np

from pytest_triton.load.users import TritonUser


def texts(batch_size: int, seed: int) -> dict[str, Any]:
    if seed % 2:
        return {"TEXT": np.array([[f"texte {seed} ligne {i}", "été"] for i in range(batch_size)])}
    rows = [[f"request {seed} row {i}".encode(), b"\x00raw"] for i in range(batch_size)]
    return {"TEXT": np.array(rows, dtype=object)}


class BytesUser(TritonUser):
    model = "echo_bytes"
    inputs = texts
    batch_size = 4
