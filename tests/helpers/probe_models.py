"""Small models whose serving behaviour the load tests can predict.

`probe_spec`: a tiny linear model that batches as soon as 8 requests wait (max batch 8) or
after 20 ms: with 8 users in flight its executions are batches of ~8; a generator that sends
one request at a time (a naive gRPC user under gevent) shows batches of 1.

`write_sleepy`: a python-backend model that sleeps 20 ms per execution, one instance, no
batching: with c requests in flight a request waits for ~c executions, so its latency is
~20 ms x c. That makes the latency-bounded search's answer known in advance. The same writer
takes other sources: `STALL_MODEL` stalls 200 ms on one request in 200 (what a closed loop
hides), `SLOWING_MODEL` gets twice as slow every second (a measurement that cannot settle),
`WARMING_MODEL` is slow for its first 7 executions (a warm-up the measurement must wait out),
`LEAKY_MODEL` keeps 256 kB per execution for good (a soak's memory gate), `CLEAN_MODEL` is the
same without the leak.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton import DynamicBatching, ModelSpec
from pytest_triton.repository import pbtxt
from tests.helpers.raw_models import write_python_directory

SLEEP_MS = 20


class Probe(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        with torch.no_grad():
            self.linear.weight.copy_(torch.linspace(-1, 1, 32).reshape(4, 8))
            self.linear.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def _inputs(batch: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(batch, 8, generator=generator)}


def probe_spec(name: str = "probe") -> ModelSpec:
    return ModelSpec(
        name=name,
        module=Probe,
        example_inputs=_inputs(4, 0),
        inputs=["x"],
        outputs=["y"],
        max_batch_size=8,
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=20_000),
        input_factory=_inputs,
    )


SLEEPY_MODEL = f"""
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep({SLEEP_MS} / 1000)
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x[:, :4])]))
        return responses
"""


LAUNCH_MS = 10
LAUNCH_BOUND_MODEL = f"""
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({LAUNCH_MS} / 1000)  # once per execution, whatever its batch size
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy()[:, :4])])
            for r in requests]
"""


def write_launch_bound(root: Path, name: str, *, batching: bool) -> Path:
    """A model whose execution costs LAUNCH_MS whatever the batch, like a launch-bound GPU
    kernel: the cost the tutorial's batching gain comes from, without CPU noise."""
    directory = write_sleepy(root, name, source=LAUNCH_BOUND_MODEL, max_batch_size=16)
    if batching:
        config = pbtxt.read_config(directory / "config.pbtxt")
        config.dynamic_batching.SetInParent()  # dynamic_batching { }, as the tutorial
        pbtxt.write_config(directory, config)
    return directory


def write_sleepy(
    root: Path, name: str = "sleepy", *, source: str = SLEEPY_MODEL, max_batch_size: int = 8
) -> Path:
    """A python-backend model dir with the probe's signature (x: FP32 [8] -> y: FP32 [4])."""
    return write_python_directory(
        root,
        name,
        source,
        [("x", mc.TYPE_FP32, [8])],
        [("y", mc.TYPE_FP32, [4])],
        max_batch_size,
        cpu_instances=1,
    )


STALL_EVERY = 200
STALL_MS = 200
STALL_MODEL = f"""
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.count = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.count += 1
            if self.count % {STALL_EVERY} == 0:
                time.sleep({STALL_MS} / 1000)  # the stall: one request in {STALL_EVERY}
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x[:, :4])]))
        return responses
"""


WARMED_FILE = "warmed_at"  # in a paced model's directory: see paced_model's marked_after


def paced_model(comment: str, sleep_s: str, marked_after: int | None = None) -> str:
    """A python model (x -> y = x[:, :4]) that sleeps `sleep_s` seconds an execution, an
    expression of `now - self.first` (seconds since its first request) or of `self.count`
    (executions so far, this one included). `marked_after`: at the end of that execution it
    writes the wall clock (as Locust's windows are cut) to WARMED_FILE in its directory."""
    mark = (
        ""
        if marked_after is None
        else f"""
        if self.count == {marked_after}:
            with open(os.path.join(self.directory, "{WARMED_FILE}"), "w") as f:
                f.write(repr(time.time()))"""
    )
    return f"""
import os
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.first = None
        self.count = 0
        self.directory = args["model_repository"]

    def execute(self, requests):
        now = time.monotonic()
        self.first = self.first or now
        self.count += 1
        # {comment}
        time.sleep({sleep_s}){mark}
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy()[:, :4])])
            for r in requests]
"""


SLOWING_MODEL = paced_model(
    "twice as slow every second: 5, 10, 20, 40 ... ms, at most 1 s",
    "min(0.005 * 2 ** (now - self.first), 1.0)",
)
WARM_AFTER = 7  # slow executions of the warming model
SLOW_S = 0.2  # each of them
WARMING_MODEL = paced_model(
    # by count, not time: Locust's preflight request comes first, and the load may follow it
    # by a second on a busy machine (a slow period by time was then over before the load)
    f"a backend warming up: {SLOW_S} s an execution for its first {WARM_AFTER}, then 20 ms",
    f"{SLOW_S} if self.count <= {WARM_AFTER} else 0.02",
    marked_after=WARM_AFTER,
)


LEAK_KB = 256
LEAKY_MODEL = f"""
import triton_python_backend_utils as pb_utils

KEPT = []  # the leak: every execution keeps {LEAK_KB} kB for good


class TritonPythonModel:
    def execute(self, requests):
        KEPT.append(b"\\x01" * ({LEAK_KB} * 1024))  # written, so resident
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy()[:, :4])])
            for r in requests]
"""
"""A model that leaks LEAK_KB per execution (the probe's signature): what a soak catches."""

CLEAN_MODEL = LEAKY_MODEL.replace("KEPT.append(", "len(")
"""The same work without keeping it."""


CORRUPTED_INDEX = (0, 1)
WRONG_WHEN_BATCHED_MODEL = f"""
import numpy as np
import triton_python_backend_utils as pb_utils

WEIGHT = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)  # Probe's weights, bias 0


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            y = (x @ WEIGHT.T).astype(np.float32)
            if len(requests) > 1:  # the bug: only when the batcher combined requests
                y[{CORRUPTED_INDEX}] += 0.25
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", y)]))
        return responses
"""


def write_wrong_when_batched(root: Path, name: str = "wrong_when_batched") -> Path:
    """The probe's model in numpy (right answers, one request at a time) that corrupts one
    element of every answer in an execution of several requests: wrong only under
    concurrency, with dynamic batching (5 ms queue delay) combining requests."""
    directory = write_sleepy(root, name, source=WRONG_WHEN_BATCHED_MODEL)
    config = pbtxt.read_config(directory / "config.pbtxt")
    config.dynamic_batching.max_queue_delay_microseconds = 5000
    pbtxt.write_config(directory, config)
    return directory


WRONG_FOR_BATCHES_MODEL = WRONG_WHEN_BATCHED_MODEL.replace(
    "if len(requests) > 1:  # the bug: only when the batcher combined requests",
    "if x.shape[0] > 1:  # the bug: only in requests of several rows",
)


def write_wrong_for_batches(root: Path, name: str = "wrong_for_batches") -> Path:
    """The probe's model in numpy that corrupts one element of every answer to a request of
    more than one row (no dynamic batching): right for batch 1, wrong for batch 2."""
    return write_sleepy(root, name, source=WRONG_FOR_BATCHES_MODEL)


class ProbeV2(Probe):
    """The probe's next version: the same architecture, other weights (the bias 0.5)."""

    def __init__(self) -> None:
        super().__init__()
        with torch.no_grad():
            self.linear.bias.fill_(0.5)


def probe_v2_spec() -> ModelSpec:
    """Version 2 of probe_spec(): same name and signature, answers 0.5 higher."""
    return dataclasses.replace(probe_spec(), module=ProbeV2, version=2)


class ExportedWrong(Probe):
    """Version 2 whose exported artifact answers 1 higher than its PyTorch module: the
    export differs from the model (a branch taken only while exporting or tracing), so every
    answer it serves is neither version 1's reference nor its own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if torch.jit.is_tracing() or torch.compiler.is_exporting():
            y = y + 1.0
        return y


def broken_v2_spec() -> ModelSpec:
    """Version 2 of probe_spec() that serves wrong answers: what an update gate must fail."""
    return dataclasses.replace(probe_spec(), module=ExportedWrong, version=2)


REFUSED_TEXT = "refused: the input sums above 0"
RAISES_SOME_MODEL = f"""
import numpy as np
import triton_python_backend_utils as pb_utils

WEIGHT = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)  # Probe's weights, bias 0


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            if float(x.sum()) > 0:  # the server's error, for some inputs only
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("{REFUSED_TEXT}")))
                continue
            y = (x @ WEIGHT.T).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", y)]))
        return responses
"""


def write_raises_some(root: Path, name: str = "raises_some") -> Path:
    """The probe's model in numpy that answers an error (REFUSED_TEXT) to a request whose
    input sums above 0, and the right answer to the others: a server-side error on some
    inputs only."""
    return write_sleepy(root, name, source=RAISES_SOME_MODEL)
