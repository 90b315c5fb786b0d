"""Locust users that send Triton inference requests over HTTP or gRPC.

A user is one closed loop (no wait between requests): N users keep N requests in flight, which
is perf_analyzer's concurrency mode. With --triton-request-rate R the users share an open loop
of R requests per second instead (perf_analyzer's request-rate mode, see open_loop.py).
Requests go through TritonClient, built once per user and only sent in the loop. A closed
loop without a wait (TritonUser's own) of requests up to 1 MiB hands its connection to the
process's multiplexer (multiplexer.py: one greenlet drives every such user's socket, a third
less CPU per request than a greenlet each, and the requests after one batch's answers leave
together); paced users, open loops and larger requests send from their own greenlet. Each
request is fired as a Locust request event named after the model, with `response_length`
= the size of its answer as it came over the wire (so Locust's "Average size (bytes)" means
bytes; the direct HTTP/2 path reads no outputs, only the status) and
`context["batch_size"]` = its samples, which pytest-triton counts beside Locust's statistics:
the verdict, the web UI's Triton tab and PREFIX_triton.csv report samples/s (requests x batch
size) as NVIDIA's examples do.

Importing this module imports locust (gevent monkey patching), switches gRPC to gevent and
installs pytest-triton's listeners on Locust's events.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import locust
import numpy as np
from locust import task

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import ConfigError, InferenceError, SharedMemoryError, SpecError
from pytest_triton.client.triton_client import PreparedRequest, Protocol, TritonClient
from pytest_triton.client.wire.lane import Lane
from pytest_triton.client.wire.request import RawAnswer, answer_size
from pytest_triton.load.runner import agreement, grpc_gevent, listeners, multiplexer
from pytest_triton.load.runner.bulk_requests import BulkRequests, bulk_requests
from pytest_triton.load.runner.checking import Reference, update_label, user_answer_check
from pytest_triton.load.runner.embedded import EmbeddedModel, zoo_model
from pytest_triton.load.runner.open_loop import OpenLoop, ReplayLoop, open_loop
from pytest_triton.load.runner.options import default_targets
from pytest_triton.load.runner.rollout import sent_after_retirement
from pytest_triton.load.runner.user_settings import (
    user_batch_size,
    user_endpoint,
    user_model,
    user_protocol,
    user_security,
    user_shared_memory,
)
from pytest_triton.load.runner.user_start import StartingUser
from pytest_triton.load.webui import events

grpc_gevent.init()
listeners.install_listeners(locust.events)
events.install_web_listeners(locust.events)  # after the run's own: they read what it made

InputsFactory = Callable[[int, int], Mapping[str, Any]]
Answered = tuple[PreparedRequest, RawAnswer]

__all__ = [
    "EmbeddedModel",
    "GrpcTritonUser",
    "HttpTritonUser",
    "TritonUser",
    "default_targets",
    "zoo_model",
]


def _numpy(value: Any) -> Array:
    if type(value).__module__ == "torch":  # a torch.Tensor; torch itself is imported elsewhere
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value)


class TritonUser(StartingUser):
    """Sends one inference request after another to one model.

    Class attributes configure it: `model` (Triton model name; default: the name `served` gets
    on the embedded server), `version`, `batch_size`, `protocol` ("http", "grpc" or None for
    --triton-protocol, else the host's scheme), `inputs` (a factory (batch_size, seed) ->
    {name: array}; default: `served`'s), `outputs` (names to request; None: all), `served`
    (the EmbeddedModel started when no --host is given), `reference` (inputs -> the outputs a
    right answer has; default: `served`'s PyTorch module, see checking.py). --triton-model
    and --triton-batch-size override them.
    """

    abstract = True
    _user_kind = "triton"
    _refusals = (ConfigError, SharedMemoryError, InferenceError, SpecError)
    triton_preflight: ClassVar[bool] = True  # its run asks --host once before any load
    model: str | None = None
    version: str = ""
    batch_size: int = 1
    protocol: Protocol | None = None
    inputs: ClassVar[InputsFactory | None] = None
    outputs: Sequence[str] | None = None
    served: EmbeddedModel | None = None
    reference: ClassVar[Reference | None] = None
    distinct_inputs: int = 4  # different batches a user cycles through
    timeout_s: float = 60.0

    _open_loop: OpenLoop | ReplayLoop | None = None
    _update_label: str | None = None  # the new version's, during a model update

    def set_up(self, host: str, config: TritonConfig, number: int) -> None:
        cls = type(self)
        self._bulk: BulkRequests | None = None
        self._model = user_model(cls, config)
        self._batch = user_batch_size(cls, config)
        self._protocol = user_protocol(cls, host, config, number)
        url = user_endpoint(self._protocol, host, config)
        factory = cls.inputs or (cls.served.inputs if cls.served else None)
        if factory is None:
            raise ConfigError(
                f"{cls.__name__} has no `inputs` factory and no `served` model to make inputs from"
            )
        first = number * self.distinct_inputs
        batches = [
            {n: _numpy(v) for n, v in factory(self._batch, first + i).items()}
            for i in range(self.distinct_inputs)
        ]
        self._open_loop = open_loop(self.environment, config, number)
        in_flight = config.load.max_in_flight if self._open_loop else 1
        self._client = TritonClient(
            url,
            self._protocol,
            timeout_s=self.timeout_s,
            concurrency=in_flight,
            shared_memory=user_shared_memory(config),
            output_shared_memory_size=config.client.output_shared_memory_size,
            security=user_security(self._protocol, host, config),
        )
        prepared = self._client.prepare_all(self._model, batches, self.outputs, self.version)
        self._by_batch: dict[int, Iterator[PreparedRequest]] = {}
        traced: dict[int, tuple[dict[str, Array], PreparedRequest]] = {}
        if isinstance(self._open_loop, ReplayLoop):  # a trace's own batch sizes
            for size in self._open_loop.batch_sizes():
                batch = {n: _numpy(v) for n, v in factory(size, first).items()}
                (request,) = self._client.prepare_all(
                    self._model, [batch], self.outputs, self.version
                )
                traced[size] = (batch, request)
                self._by_batch[size] = itertools.repeat(request)
        # the trace's batches are checked like the user's own, each against its reference
        self._check = user_answer_check(
            self.environment,
            cls,
            config,
            host,
            self._model,
            [*batches, *(batch for batch, _ in traced.values())],
            [*prepared, *(request for _, request in traced.values())],
            number=number,
            context=f"model {self._model!r}, protocol {self._client.id!r}",
        )
        agreement.count_in_rate(self.environment, self._check)
        self._update_label = update_label(config) if self._check is not None else None
        self._requests: Iterator[PreparedRequest] = itertools.cycle(prepared)
        self._lane = self._multiplexed(prepared, config.load.grpc_connections == "shared")
        # a multiplexed user's answers come faster than events are worth their CPU
        self._bulk = bulk_requests(self.environment) if self._lane is not None else None
        self._request_type = "HTTP" if self._protocol == "http" else "gRPC"
        self._context = {"batch_size": self._batch, "protocol": self._protocol}

    def _multiplexed(self, prepared: Sequence[PreparedRequest], shared: bool) -> Lane[Any] | None:
        """A lane for this process's multiplexer (see multiplexer.py) where the user is a
        closed loop of small requests without a wait (its class keeps TritonUser's
        wait_time and single task), else None: the user sends from its own greenlet, through
        Locust's task loop. `shared`: gRPC users share one connection
        (--triton-grpc-connections)."""
        cls = type(self)
        if (
            self._open_loop is not None
            or not multiplexer.multiplexer_available()
            or cls.wait_time is not TritonUser.wait_time
            or cls.tasks != [TritonUser.infer]
            or any(len(r.wire) > multiplexer.MAX_REQUEST_BYTES for r in prepared)
        ):
            return None
        return self._client.lane(shared=shared)

    @task
    def infer(self) -> None:
        if self._open_loop is not None:
            self._open_loop.run(self._send)  # until the user is stopped
        elif self._lane is not None:  # until the user is stopped
            multiplexer.multiplexer(self.environment).serve(
                self._lane,
                self._requests,
                self._record,
                self.timeout_s,
                answers=self._check is not None,
            )
        else:
            self._send(time.perf_counter())

    def _send(self, due: float, batch_size: int | None = None) -> None:
        """One request (of the user's batch size, or of a replayed arrival's); its latency
        counts from `due` (now in a closed loop, its scheduled time in an open one)."""
        request = next(self._by_batch[batch_size] if batch_size else self._requests)
        error: Exception | None = None
        raw: RawAnswer | None = None
        try:
            raw = self._client.send_answer(request)
        except Exception as exc:  # every client/server failure is a failed request, not a crash
            error = exc
        latency_s = time.perf_counter() - due
        answer = (request, raw) if raw is not None else None
        context = {**self._context, "batch_size": batch_size} if batch_size else self._context
        self._record(latency_s, answer_size(raw) if raw is not None else 0, error, answer, context)

    def _record(
        self,
        latency_s: float,
        answered: int,
        error: Exception | None,
        answer: Answered | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        """A Locust request event for one request; a wrong answer fails it."""
        if answer is not None and error is None and self._check is not None:
            if self._update_label is not None:  # after the update, only the new version
                after = sent_after_retirement(self.environment, latency_s)
                self._check.allowed = (self._update_label,) if after else None
            error = self._check.check(*answer).wrong
        if error is None and self._bulk is not None and context is None:
            self._bulk.add(
                self._request_type, self._model, self._context, latency_s * 1e3, answered
            )
            return
        self.environment.events.request.fire(
            request_type=self._request_type,
            name=self._model,
            response_time=latency_s * 1e3,
            response_length=answered,
            exception=error,
            context=context or self._context,
        )

    def on_stop(self) -> None:
        if self._open_loop is not None:
            self._open_loop.stop()
        lane = getattr(self, "_lane", None)
        if lane is not None:
            lane.close()
        bulk = getattr(self, "_bulk", None)
        if bulk is not None:  # the last answers, before Locust's last figures
            bulk.flush()
        client = getattr(self, "_client", None)
        if client is not None:
            with contextlib.suppress(Exception):  # closing a connection to a stopped server
                client.close()


class HttpTritonUser(TritonUser):
    """A TritonUser that always speaks HTTP/REST (KServe v2)."""

    abstract = True
    protocol: Protocol | None = "http"


class GrpcTritonUser(TritonUser):
    """A TritonUser that always speaks gRPC."""

    abstract = True
    protocol: Protocol | None = "grpc"
