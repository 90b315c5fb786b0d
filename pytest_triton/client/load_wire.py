"""The load generators' path for one client: prepared requests over the hand-written wire
request_path.choose() named (HTTP/1.1 keep-alive, HTTP/2 spoken directly, or prepared bytes
through a gRPC channel), their status or raw answer only, and lanes a load driver waits on.

It owns those connections and closes them itself, at close() or when its client is dropped,
instead of leaving each to its library's destructor. gRPC channels are the exception to
"closed means gone": grpcio's Channel.close() returns before its socket is shut, which one of
grpcio's own threads does a moment later, so a closed channel's connection may be seen open
for that moment.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from pytest_triton.client.control import Control
from pytest_triton.client.request_path import RequestPath
from pytest_triton.client.wire import grpc_h2
from pytest_triton.client.wire.grpc_call import GrpcInfer
from pytest_triton.client.wire.http_conn import HttpConnections, raise_for_status
from pytest_triton.client.wire.lane import GrpcLane, HttpLane, Lane, SharedGrpcLane
from pytest_triton.client.wire.request import PreparedRequest, RawAnswer, answer_size


class LoadWire:
    """send_status, send_answer and lanes over `path.load`, failing as the checks do."""

    def __init__(self, control: Control, path: RequestPath) -> None:
        self._control = control
        self.path = path
        endpoint = control.endpoint
        http = endpoint.protocol == "http"
        self.http = (
            HttpConnections(endpoint.url, endpoint.timeout_s, endpoint.security) if http else None
        )
        self.grpc = None if http else GrpcInfer(endpoint.url, endpoint.security)
        self.h2: grpc_h2.GrpcConnections | None = None  # made on first use
        self._lock = threading.Lock()

    def send_status(self, request: PreparedRequest) -> int:
        """The answer's size in bytes as it came over the wire (the HTTP body, the gRPC
        message; over shared memory the outputs are not in it)."""
        return answer_size(self.send_answer(request))

    def send_answer(self, request: PreparedRequest) -> RawAnswer:
        """The answer as it came back, not decoded."""
        call = self._control.call
        http = self.http
        if http is not None:
            reply = call(
                request.model, lambda: http.exchange(request.wire), request.version, request
            )
            if not reply.ok:
                call(request.model, lambda: raise_for_status(reply), request.version, request)
            return reply
        return call(request.model, lambda: self._grpc_exchange(request), request.version, request)

    def lane(self, shared: bool = False) -> Lane[Any] | None:
        """A connection of its own for a driver that waits on many sockets at once; None where
        that path is not available (TLS, gRPC without `hpack`, CUDA shared memory)."""
        control = self._control

        def failure(request: PreparedRequest, exc: Exception) -> Exception:
            return control.failure(request.model, exc, request.version, request)

        endpoint = control.endpoint
        if endpoint.security.tls:
            return None  # the multiplexer reads raw sockets: TLS stays on the blocking path
        if self.http is not None:
            return HttpLane(endpoint.url, endpoint.timeout_s, failure)
        lean = self._lean_grpc()
        if lean is None:
            return None
        return SharedGrpcLane(lean, failure) if shared else GrpcLane(lean, failure)

    def _grpc_exchange(self, request: PreparedRequest) -> bytes:
        """HTTP/2 spoken directly (grpc_h2, a third of grpcio's CPU per request under gevent),
        else the prepared bytes through a gRPC channel."""
        lean = self._lean_grpc() if request.frames is not None else None
        if lean is not None:
            assert request.frames is not None
            return lean.exchange(request.frames)
        assert self.grpc is not None
        return self.grpc.exchange(request.wire, self._control.endpoint.timeout_s)

    def _lean_grpc(self) -> grpc_h2.GrpcConnections | None:
        if self.h2 is None:
            if self.path.load != "grpc-h2":
                return None
            endpoint = self._control.endpoint
            with self._lock:
                if self.h2 is None:
                    self.h2 = grpc_h2.GrpcConnections(
                        endpoint.url, endpoint.timeout_s, endpoint.security
                    )
        return self.h2

    def release_idle(self) -> None:
        """Close the keep-alive connections no request is using."""
        for pool in (self.http, self.h2):
            if pool is not None:
                pool.close_idle()

    def close(self) -> None:
        """Close every connection, each even when another fails; idempotent."""
        for part in (self.http, self.grpc, self.h2):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.close()
