"""The checks' path for one client: a request prepared once (tensors in it or in shared
memory), then sent through tritonclient's own client for every output it asked for, one at a
time or many in flight together (so the dynamic batcher can combine them). request_path.py
says why the checks take this path."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from pytest_triton.base.dtypes import TYPES, Array, tensor_type
from pytest_triton.base.errors import SpecError
from pytest_triton.client import failures
from pytest_triton.client.control import Control, Tensors
from pytest_triton.client.failures import request_problem
from pytest_triton.client.memory_regions import MemoryRegions
from pytest_triton.client.request_path import standard_infer, standard_infer_async
from pytest_triton.client.wire.request import PreparedRequest, build_request, read_result

IN_FLIGHT = 64
"""Requests infer_many keeps in flight at once."""


class Inference:
    """prepare, send, infer, infer_many over tritonclient's client for the endpoint."""

    def __init__(self, control: Control, memory: MemoryRegions) -> None:
        self._control = control
        self._memory = memory
        self._senders: ThreadPoolExecutor | None = None  # HTTP's infer_many, made on first use
        self._lock = threading.Lock()

    def prepare_all(
        self,
        model: str,
        batches: Sequence[Tensors],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> list[PreparedRequest]:
        """Requests of one model; over shared memory their blocks share one region."""
        endpoint = self._control.endpoint
        problem = request_problem(model, version)
        if problem is not None:
            raise failures.refused(endpoint, model, problem)
        batches = [self._wire_ready(model, b) for b in batches]
        if endpoint.shared_memory == "none":
            return [
                build_request(
                    endpoint.protocol,
                    endpoint.url,
                    model,
                    b,
                    outputs,
                    version,
                    headers=endpoint.headers,
                )
                for b in batches
            ]
        return self._control.call(
            model, lambda: self._memory.prepare(model, batches, outputs, version), version
        )

    def _wire_ready(self, model: str, inputs: Tensors) -> dict[str, Array]:
        """Contiguous arrays Triton has a datatype for (numpy str arrays travel as BYTES,
        UTF-8 encoded); any other dtype is refused naming the input."""
        ready = {}
        for name, array in inputs.items():
            array = np.ascontiguousarray(array)
            if array.dtype.kind == "U":
                array = array.astype(object)
            try:
                tensor_type(array.dtype)
            except SpecError:
                raise failures.refused(
                    self._control.endpoint,
                    model,
                    (
                        f"input {name!r} has numpy dtype {array.dtype}, which no Triton datatype "
                        f"matches ({', '.join(t.wire for t in TYPES)}): convert it first, e.g. "
                        "array.astype(np.float32)"
                    ),
                ) from None
            ready[name] = array
        return ready

    def send(self, request: PreparedRequest) -> dict[str, Array]:
        """Every output the request asked for, by name, through tritonclient's infer()."""
        control = self._control
        endpoint = control.endpoint
        return control.call(
            request.model,
            lambda: standard_infer(
                control.tritonclient, endpoint.protocol, request, endpoint.timeout_s
            ),
            request.version,
            request,
        )

    def infer(
        self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None, version: str = ""
    ) -> dict[str, Array]:
        names = list(outputs) if outputs is not None else self._control.output_names(model, version)
        (request,) = self.prepare_all(model, [inputs], names, version)
        with request:
            return self.send(request)

    def infer_many(
        self,
        model: str,
        requests: Sequence[Tensors],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> list[dict[str, Array]]:
        """All requests in flight together, up to IN_FLIGHT at once; answers in request
        order, the first failure in that order raised as send()'s."""
        names = list(outputs) if outputs is not None else self._control.output_names(model, version)
        built = self.prepare_all(model, requests, names, version)
        try:
            if self._control.endpoint.protocol == "grpc":
                return self._send_async(built)
            return list(self._sender_threads().map(self.send, built))
        finally:
            for request in built:
                request.release()

    def _send_async(self, built: Sequence[PreparedRequest]) -> list[dict[str, Array]]:
        """gRPC: every request through tritonclient.grpc's async_infer from this thread (its
        channel carries them as streams), none left in flight when this returns or raises,
        so their shared-memory blocks are free to release."""
        control = self._control
        client, timeout_s = control.tritonclient, control.endpoint.timeout_s
        window = threading.BoundedSemaphore(IN_FLIGHT)
        sent: list[Future[Any]] = []
        try:
            for request in built:
                window.acquire()
                send = functools.partial(
                    standard_infer_async, client, request, timeout_s, window.release
                )
                sent.append(control.call(request.model, send, request.version, request))
        finally:
            futures.wait(sent)
        return [
            control.call(r.model, functools.partial(_answer, r, f), r.version, r)
            for r, f in zip(built, sent, strict=True)
        ]

    def _sender_threads(self) -> ThreadPoolExecutor:
        """HTTP sends infer_many's requests on threads, each through its own tritonclient.http
        client: that client's async_infer waits 10 ms (a gevent.sleep) after each request it
        starts, so 64 requests would reach the server over 640 ms, not together, and the
        dynamic batcher could not combine them (the batching proofs rely on that); its
        connections are also capped by the client's `concurrency`. The threads are kept for
        the client's life: a pool made per call left each ended thread's own HTTP client (and
        its sockets) open until close()."""
        with self._lock:
            if self._senders is None:
                self._senders = ThreadPoolExecutor(
                    max_workers=IN_FLIGHT, thread_name_prefix="pytest-triton-send"
                )
            return self._senders

    def close(self) -> None:
        """Stop the sender threads; idempotent."""
        with self._lock:
            senders, self._senders = self._senders, None
        if senders is not None:
            senders.shutdown(wait=False, cancel_futures=True)


def _answer(request: PreparedRequest, sent: Future[Any]) -> dict[str, Array]:
    """A sent request's outputs, or its failure (tritonclient's) raised."""
    return read_result(request, sent.result())
