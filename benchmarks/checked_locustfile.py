"""Locust users for the answer-checking benchmark: the trivial model of loadgen_vs_wrk.py
(Y = X), its reference the identity, so that every check runs and passes."""

from collections.abc import Mapping
from typing import Any

from trivial_locustfile import trivial_inputs

from pytest_triton.load.users import TritonUser


def identity(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {"Y": inputs["X"]}


class CheckedTrivialUser(TritonUser):
    model = "trivial"
    batch_size = 1
    inputs = trivial_inputs
    reference = identity
