"""Locust users for the load-generator benchmark: the trivial model of loadgen_vs_wrk.py."""

import numpy as np

from pytest_triton.load.users import TritonUser


def trivial_inputs(batch_size: int, seed: int) -> dict[str, np.ndarray]:
    return {"X": np.full((batch_size, 4), seed % 7, dtype=np.float32)}


class TrivialUser(TritonUser):
    model = "trivial"
    batch_size = 1
    inputs = trivial_inputs
