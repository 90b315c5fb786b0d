"""Which path a request takes, decided here and nowhere else.

Every call that returns decoded outputs (send, infer, infer_many: parity, batching proofs,
pipelines) goes through tritonclient's InferenceServerClient, the client users deploy, so a
check proves the served model over that client and not over this project's own wire code.
The hand-written wire (wire/http_conn.py's HTTP/1.1 pool, wire/grpc_h2.py's direct HTTP/2, a
bare gRPC channel with prepared bytes) is kept for the load paths only: send_status,
send_answer, lanes and the multiplexer, where its lower CPU per request is what is measured.
tests/client/test_request_path.py holds the two paths to the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal

from pytest_triton.base.dtypes import Array
from pytest_triton.client.wire import grpc_h2
from pytest_triton.client.wire.request import PreparedRequest, Protocol, read_result
from pytest_triton.client.wire.shm import Transport

Wire = Literal["http1-pool", "grpc-h2", "grpc-channel"]
"""The hand-written load wire: HTTP/1.1 keep-alive pool, HTTP/2 spoken directly, or
prepared bytes through a gRPC channel (where `hpack` is missing or over CUDA memory)."""


@dataclass(frozen=True)
class RequestPath:
    """What a client's requests go through: `checks` for decoded answers, `load` for the
    load generators' status-only and raw answers."""

    checks: str
    load: Wire

    def __str__(self) -> str:
        return f"checks over {self.checks}, load over {self.load}"


def choose(protocol: Protocol, shared_memory: Transport) -> RequestPath:
    """The one place the path is chosen. CUDA regions stay on the gRPC channel for load:
    no GPU here to prove the direct path with them."""
    if protocol == "http":
        load: Wire = "http1-pool"
    elif shared_memory != "cuda" and grpc_h2.h2_available():
        load = "grpc-h2"
    else:
        load = "grpc-channel"
    return RequestPath(checks=f"tritonclient.{protocol}", load=load)


def standard_infer(
    client: Any, protocol: Protocol, request: PreparedRequest, timeout_s: float
) -> dict[str, Array]:
    """Send a prepared request with tritonclient's own infer() (its InferInput and
    InferRequestedOutput, shared-memory places included) and read every output asked for.
    Failures are tritonclient's InferenceServerException, as the load wire raises them."""
    extra = {"client_timeout": timeout_s} if protocol == "grpc" else {}
    result = client.infer(
        request.model,
        request.inputs,
        model_version=request.version,
        outputs=request.requested,
        **extra,
    )
    return read_result(request, result)


def standard_infer_async(
    client: Any, request: PreparedRequest, timeout_s: float, done: Callable[[], None]
) -> Future[Any]:
    """Send a prepared request with tritonclient.grpc's async_infer (the same InferInputs as
    standard_infer) and return at once: the Future gets its InferResult, or tritonclient's
    InferenceServerException, after `done()` is called from gRPC's callback."""
    sent: Future[Any] = Future()

    def callback(result: Any, error: Exception | None) -> None:
        done()
        if error is not None:
            sent.set_exception(error)
        else:
            sent.set_result(result)

    client.async_infer(
        request.model,
        request.inputs,
        callback,
        model_version=request.version,
        outputs=request.requested,
        client_timeout=timeout_s,
    )
    return sent
