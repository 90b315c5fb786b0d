"""The Locust users a triton-perf point runs for each kind of model: TritonUser for a single
model, SequenceUser (each user owns one sequence at a time: perf_analyzer's concurrency mode
on a sequence model) and StreamUser (one stream at a time, or its share of an open loop).

Imports locust (through the users): only the generator process imports it.
"""

from __future__ import annotations

from typing import Any

from locust import User

from pytest_triton.base.config import TritonConfig
from pytest_triton.client.wire.request import Protocol
from pytest_triton.load.perf.kinds import (
    SEQUENCE_ID_RANGE,
    SEQUENCE_LENGTH,
    SEQUENCE_LENGTH_VARIATION,
    Kind,
)
from pytest_triton.load.runner.embedded import Served
from pytest_triton.load.users import TritonUser


def sweep_user(
    kind: Kind,
    served: Served,
    model: str,
    host: str,
    batch_size: int,
    protocol: Protocol,
) -> type[User]:
    """The user class of one point: `model` on `host`, `served` making inputs and references."""
    attributes: dict[str, Any] = {"served": served, "model": model, "host": host}
    # torch comes with the sequence and stream users only: a single model's sweep starts
    # without it (tests/test_architecture.py)
    if kind == "sequence":
        from pytest_triton.load.sequence_users import SequenceUser

        # perf_analyzer's defaults; --sequence-length and friends override them
        attributes.update(
            sequence_length=SEQUENCE_LENGTH,
            sequence_length_variation=SEQUENCE_LENGTH_VARIATION / 100,
            sequence_id_range=SEQUENCE_ID_RANGE,
            protocol=protocol,
        )
        return type("SweepSequenceUser", (SequenceUser,), attributes)
    if kind == "stream":
        from pytest_triton.load.stream_users import StreamUser

        attributes["protocol"] = protocol
        return type("SweepStreamUser", (StreamUser,), attributes)
    attributes["batch_size"] = batch_size
    return type("SweepUser", (TritonUser,), attributes)


def kind_config(config: TritonConfig, kind: Kind, embedded: str | None) -> TritonConfig:
    """The run's settings for a sequence or stream point: on the server triton-perf started
    itself (`embedded`: its encoded endpoints) answers are checked by default, as a
    locustfile checks its own server's (every answer of a sequence; one stream in 100)."""
    if kind == "single" or embedded is None:
        return config
    return config.with_overrides({"endpoints": embedded})
