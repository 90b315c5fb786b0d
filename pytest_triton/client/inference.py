"""Inference: a request prepared once, then sent for every output (parity: through
tritonclient's own client) or only its status (load: over HTTP/1.1, the direct HTTP/2 gRPC
path or gRPC's channel, and as a lane a load driver waits on), one at a time or many in
flight. request_path.py decides which."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_triton.base.dtypes import TYPES, Array, tensor_type
from pytest_triton.base.errors import (
    SpecError,
)
from pytest_triton.client import failures
from pytest_triton.client.control import Tensors
from pytest_triton.client.failures import request_problem
from pytest_triton.client.memory_regions import MemoryRegions
from pytest_triton.client.request_path import RequestPath, standard_infer
from pytest_triton.client.wire import grpc_h2
from pytest_triton.client.wire.http_conn import raise_for_status
from pytest_triton.client.wire.lane import GrpcLane, HttpLane, Lane, SharedGrpcLane
from pytest_triton.client.wire.request import (
    PreparedRequest,
    RawAnswer,
    answer_size,
    build_request,
)


class Inference(MemoryRegions):
    """Inference calls: prepare, send, send_status, send_answer, infer, infer_many, lane."""

    path: RequestPath  # request_path.choose(), set in TritonClient.__init__

    def prepare(
        self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None, version: str = ""
    ) -> PreparedRequest:
        """Build a request once; outputs None asks for all the model has (over shared memory
        that takes the model's metadata, asked once per model)."""
        return self.prepare_all(model, [inputs], outputs, version)[0]

    def prepare_all(
        self,
        model: str,
        batches: Sequence[Tensors],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> list[PreparedRequest]:
        """Several requests of one model; over shared memory their blocks share one
        registered region (a load user's distinct batches)."""
        problem = request_problem(model, version)
        if problem is not None:
            raise failures.refused(self, model, problem)
        batches = [self._wire_ready(model, b) for b in batches]
        if self.shared_memory == "none":
            return [
                build_request(
                    self.protocol, self.url, model, b, outputs, version, headers=self._headers
                )
                for b in batches
            ]
        return self._call(
            model, lambda: self._prepare_in_memory(model, batches, outputs, version), version
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
                    self,
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
        """Send a prepared request through tritonclient's own client (request_path.py: the
        checks go over the client users deploy); every output it asked for, by name."""
        return self._call(
            request.model,
            lambda: standard_infer(self._conns.control, self.protocol, request, self.timeout_s),
            request.version,
            request,
        )

    def send_status(self, request: PreparedRequest) -> int:
        """Send a prepared request and read no more of the answer than whether it succeeded
        (the HTTP status and Triton's error, or the gRPC status): what a load generator's
        verdict needs. Returns the answer's size in bytes as it came over the wire (the HTTP
        body, the gRPC message; over shared memory the outputs are not in it). Failures raise
        as send()'s do."""
        return answer_size(self.send_answer(request))

    def send_answer(self, request: PreparedRequest) -> RawAnswer:
        """Send a prepared request; its answer as it came back, not decoded (decode it with
        read_answer when wanted, as a load generator does with a sample of its
        answers). Failures raise as send()'s do."""
        http = self._conns.http
        if http is not None:
            reply = self._call(
                request.model, lambda: http.exchange(request.wire), request.version, request
            )
            if not reply.ok:
                self._call(request.model, lambda: raise_for_status(reply), request.version, request)
            return reply
        return self._call(
            request.model, lambda: self._grpc_exchange(request), request.version, request
        )

    def lane(self, shared: bool = False) -> Lane[Any] | None:
        """A connection of its own for a driver that waits on many sockets at once (the load
        multiplexer), sending prepared requests as send_status() does and failing as it
        does; None where that path is not available (gRPC without `hpack`, or over CUDA
        shared memory: those go through the gRPC channel). `shared`: a gRPC lane is a stream
        on the process's one connection to the server instead. The caller closes it."""

        def failure(request: PreparedRequest, exc: Exception) -> Exception:
            return self._failure(request.model, exc, request.version, request)

        if self.security.tls:
            return None  # the multiplexer reads raw sockets: TLS stays on the blocking path
        if self._conns.http is not None:
            return HttpLane(self.url, self.timeout_s, failure)
        lean = self._lean_grpc()
        if lean is None:
            return None
        return SharedGrpcLane(lean, failure) if shared else GrpcLane(lean, failure)

    def _grpc_exchange(self, request: PreparedRequest) -> bytes:
        """The answer's message over the load wire request_path.choose() named: HTTP/2
        spoken directly (grpc_h2, a third of grpcio's CPU per request under gevent), else
        the prepared bytes through a gRPC channel."""
        lean = self._lean_grpc() if request.frames is not None else None
        if lean is not None:
            assert request.frames is not None
            return lean.exchange(request.frames)
        assert self._conns.grpc is not None
        return self._conns.grpc.exchange(request.wire, self.timeout_s)

    def _lean_grpc(self) -> grpc_h2.GrpcConnections | None:
        if self._conns.h2 is None:
            if self.path.load != "grpc-h2":
                return None
            with self._lock:
                if self._conns.h2 is None:
                    self._conns.h2 = grpc_h2.GrpcConnections(
                        self.url, self.timeout_s, self.security
                    )
        return self._conns.h2

    def infer(
        self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None, version: str = ""
    ) -> dict[str, Array]:
        """One request; returns every requested output (all the model's outputs by default,
        in the order its metadata lists them)."""
        names = list(outputs) if outputs is not None else self.output_names(model, version)
        with self.prepare(model, inputs, names, version) as request:
            return self.send(request)

    def infer_many(
        self,
        model: str,
        requests: Sequence[Tensors],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> list[dict[str, Array]]:
        """Send all requests at once (so the dynamic batcher can combine them); answers in
        request order."""
        names = list(outputs) if outputs is not None else self.output_names(model, version)
        built = self.prepare_all(model, requests, names, version)
        try:
            # All in flight together (up to SENDER_THREADS), each through tritonclient's
            # infer() on one of the client's sender threads (HTTP's client is made per
            # thread; gRPC's channel carries them as streams).
            return list(self._conns.sender_threads().map(self.send, built))
        finally:
            for request in built:
                request.release()
