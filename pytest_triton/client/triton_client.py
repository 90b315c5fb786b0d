"""One client for one server, protocol and transport, built from the parts it holds: `control`
(tritonclient's control client: health, model control, metadata, statistics; every failure
mapped to the package's errors), `memory` (its shared-memory regions), `inference` (the
checks: requests prepared once and sent through tritonclient) and `load` (the load
generators' hand-written wire). request_path.py chooses the path; the repr names it.

Tests parametrized over protocols and transports call the same methods. Inference goes
`prepare()` (built once, see wire/request.py) then `send()` (every output, for parity) or
`send_status()` (the status only, for load). Every server-side rejection becomes an
InferenceError naming the model, the protocol and Triton's own message, every transport
failure (refused, reset, timed out) an InferenceError naming the server, and any failure of a
request to a server that died the ServerError saying how it died.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_triton.base import watched_servers
from pytest_triton.base.dtypes import Array
from pytest_triton.base.security import PLAIN, Security
from pytest_triton.base.watched_servers import ServerHealth
from pytest_triton.client.control import Control, Endpoint, Tensors
from pytest_triton.client.inference import Inference
from pytest_triton.client.load_wire import LoadWire
from pytest_triton.client.memory_regions import MemoryRegions
from pytest_triton.client.request_path import RequestPath, choose
from pytest_triton.client.wire.lane import Lane
from pytest_triton.client.wire.request import PreparedRequest, Protocol, RawAnswer
from pytest_triton.client.wire.shm import (
    DEFAULT_OUTPUT_BYTES,
    ID_SUFFIX,
    Transport,
    check_offered,
)

PROTOCOLS: tuple[Protocol, ...] = ("http", "grpc")
log = logging.getLogger(__name__)
__all__ = ["PROTOCOLS", "PreparedRequest", "Protocol", "ServerHealth", "Transport", "TritonClient"]


def release_connections(hostports: Iterable[str]) -> None:
    """Close this process's idle keep-alive connections to a server about to stop: Triton's
    graceful shutdown waits for every open connection up to its exit timeout (a client left
    open made a stop take 11 s over HTTP and 15 s over gRPC instead of 3)."""
    wanted = {watched_servers.address_key(h) for h in hostports}
    for client in list(_LIVE):
        if watched_servers.address_key(client.url) in wanted:
            with contextlib.suppress(Exception):
                client.release_idle()


class TritonClient:
    """One protocol's client for one server, sending tensors in the request (transport
    "none") or through shared memory ("system", "cuda": servers on this machine only)."""

    def __init__(
        self,
        url: str,
        protocol: Protocol = "http",
        *,
        timeout_s: float = 120.0,
        concurrency: int = 16,
        server: ServerHealth | None = None,
        shared_memory: Transport = "none",
        output_shared_memory_size: int = DEFAULT_OUTPUT_BYTES,
        security: Security = PLAIN,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        # A server this process started is found by its address: a client made from a bare URL
        # still learns at once that it died (and whether it maps this machine's memory).
        server = server if server is not None else watched_servers.find(url)
        check_offered(
            shared_memory,
            url,
            host_memory=getattr(server, "host_memory", None),
            server_gpu=getattr(server, "cuda_memory", None),
        )
        headers = security.header_values()  # values for the wire only; never printed
        endpoint = Endpoint(url, protocol, timeout_s, server, security, shared_memory, headers)
        self.path: RequestPath = choose(protocol, shared_memory)
        self.control = Control(endpoint, concurrency)
        self.memory = MemoryRegions(self.control, output_shared_memory_size)
        self.inference = Inference(self.control, self.memory)
        self.load = LoadWire(self.control, self.path)
        # Dropping the client closes what it holds, at once and without the collector.
        self._release = weakref.finalize(self, _close, self.inference, self.load, self.control)
        _LIVE.add(self)
        log.debug("%r", self)

    # -- what it is -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.control.endpoint.url

    @property
    def protocol(self) -> Protocol:
        return self.control.endpoint.protocol

    @property
    def timeout_s(self) -> float:
        return self.control.endpoint.timeout_s

    @property
    def server(self) -> ServerHealth | None:
        return self.control.endpoint.server

    @property
    def security(self) -> Security:
        return self.control.endpoint.security

    @property
    def shared_memory(self) -> Transport:
        return self.control.endpoint.shared_memory

    @property
    def output_shared_memory_size(self) -> int:
        return self.memory.output_size

    @property
    def shared_memory_regions(self) -> list[str]:
        """Names of the regions this client holds registered (none before its first request
        over shared memory and after close())."""
        return self.memory.names

    @property
    def id(self) -> str:
        """The test id: `http`, `grpc`, `http-shm`, `grpc-cuda-shm`."""
        return self.protocol + ID_SUFFIX[self.shared_memory]

    def __repr__(self) -> str:
        return (
            f"TritonClient({self.protocol}://{self.url}, shared_memory={self.shared_memory}, "
            f"{self.path})"
        )

    # -- health, model control, metadata, statistics (tritonclient's control client) ------

    def is_server_ready(self) -> bool:
        return self.control.is_server_ready()

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return self.control.is_model_ready(model, version)

    def load_model(
        self, model: str, config: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        self.control.load_model(model, config, files)

    def unload_model(self, model: str) -> None:
        self.control.unload_model(model)

    def server_metadata(self) -> dict[str, Any]:
        """Triton's name, version and extensions (the same keys on both protocols)."""
        return self.control.server_metadata()

    def model_config(self, model: str) -> dict[str, Any]:
        """The model's configuration as the server completed it (the same on both
        protocols)."""
        return self.control.model_config(model)

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        """Name, versions, platform, inputs and outputs (shapes as ints on both protocols)."""
        return self.control.model_metadata(model, version)

    def statistics(self, model: str, version: str = "") -> dict[str, Any]:
        """The statistics API's answer for one model, counters as ints on both protocols."""
        return self.control.statistics(model, version)

    def output_names(self, model: str, version: str = "") -> list[str]:
        return self.control.output_names(model, version)

    # -- the checks: through tritonclient (request_path.py) -------------------------------

    def prepare(
        self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None, version: str = ""
    ) -> PreparedRequest:
        """Build a request once; outputs None asks for all the model has (over shared memory
        that takes the model's metadata, asked once per model)."""
        return self.inference.prepare_all(model, [inputs], outputs, version)[0]

    def prepare_all(
        self,
        model: str,
        batches: Sequence[Tensors],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> list[PreparedRequest]:
        """Several requests of one model; over shared memory their blocks share one
        registered region (a load user's distinct batches)."""
        return self.inference.prepare_all(model, batches, outputs, version)

    def send(self, request: PreparedRequest) -> dict[str, Array]:
        """Send a prepared request through tritonclient's own client (request_path.py: the
        checks go over the client users deploy); every output it asked for, by name."""
        return self.inference.send(request)

    def infer(
        self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None, version: str = ""
    ) -> dict[str, Array]:
        """One request; returns every requested output (all the model's outputs by default,
        in the order its metadata lists them)."""
        return self.inference.infer(model, inputs, outputs, version)

    def infer_many(
        self,
        model: str,
        requests: Sequence[Tensors],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> list[dict[str, Array]]:
        """Send all requests at once (so the dynamic batcher can combine them); answers in
        request order."""
        return self.inference.infer_many(model, requests, outputs, version)

    # -- the load generators: over the hand-written wire (request_path.py) -----------------

    def send_status(self, request: PreparedRequest) -> int:
        """Send a prepared request and read no more of the answer than whether it succeeded
        (the HTTP status and Triton's error, or the gRPC status): what a load generator's
        verdict needs. Returns the answer's size in bytes as it came over the wire (the HTTP
        body, the gRPC message; over shared memory the outputs are not in it). Failures raise
        as send()'s do."""
        return self.load.send_status(request)

    def send_answer(self, request: PreparedRequest) -> RawAnswer:
        """Send a prepared request; its answer as it came back, not decoded (decode it with
        read_answer when wanted, as a load generator does with a sample of its
        answers). Failures raise as send()'s do."""
        return self.load.send_answer(request)

    def lane(self, shared: bool = False) -> Lane[Any] | None:
        """A connection of its own for a driver that waits on many sockets at once (the load
        multiplexer), sending prepared requests as send_status() does and failing as it
        does; None where that path is not available (gRPC without `hpack`, or over CUDA
        shared memory: those go through the gRPC channel). `shared`: a gRPC lane is a stream
        on the process's one connection to the server instead. The caller closes it."""
        return self.load.lane(shared)

    # -- its life --------------------------------------------------------------------------

    def release_idle(self) -> None:
        """Close the keep-alive connections no request is using; the next request or call
        opens new ones."""
        self.load.release_idle()
        self.control.release_idle()

    def close(self) -> None:
        """Unregister and unlink its shared memory, close its connections; idempotent."""
        try:
            self.memory.close()
        finally:
            self._release()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close(inference: Inference, load: LoadWire, control: Control) -> None:
    """Close every part, each even when another fails; idempotent."""
    for part in (inference, load, control):
        with contextlib.suppress(Exception):
            part.close()


_LIVE: weakref.WeakSet[TritonClient] = weakref.WeakSet()
