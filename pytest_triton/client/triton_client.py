"""One client for one server, protocol and transport: the one request path.

Tests parametrized over protocols and transports call the same methods. Inference goes
`prepare()` (built once, see wire/request.py) then `send()` (every output, for parity) or
`send_status()` (the status only, for load); health, model control, metadata and statistics
go through tritonclient's own clients. Every server-side rejection becomes an InferenceError
naming the model, the protocol and Triton's own message, every transport failure (refused,
reset, timed out) an InferenceError naming the server, and any failure of a request to a
server that died the ServerError saying how it died.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import tritonclient.http as httpclient

from pytest_triton.base import watched_servers
from pytest_triton.base.security import PLAIN, Security
from pytest_triton.base.watched_servers import ServerHealth
from pytest_triton.client.connections import Connections
from pytest_triton.client.inference import Inference
from pytest_triton.client.request_path import choose
from pytest_triton.client.wire.grpc_call import GrpcInfer
from pytest_triton.client.wire.http_conn import HttpConnections
from pytest_triton.client.wire.http_control import PerThreadControl, WithHeaders
from pytest_triton.client.wire.request import PreparedRequest, Protocol
from pytest_triton.client.wire.shm import (
    DEFAULT_OUTPUT_BYTES,
    ID_SUFFIX,
    SharedMemory,
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


class TritonClient(Inference):
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
        self.url = url
        self.protocol: Protocol = protocol
        self.security = security
        self._headers = security.header_values()  # values for the wire only; never printed
        self.shared_memory: Transport = shared_memory
        self.output_shared_memory_size = output_shared_memory_size
        self.timeout_s = timeout_s
        self.server = server
        self.path = choose(protocol, shared_memory)
        self._outputs: dict[tuple[str, str], list[str]] = {}
        self._signatures: dict[tuple[str, str], tuple[list[dict[str, Any]], bool]] = {}
        self._memory: SharedMemory | None = None
        self._lock = threading.Lock()
        if protocol == "http":
            control: Any = PerThreadControl(
                functools.partial(
                    httpclient.InferenceServerClient,
                    url,
                    concurrency=concurrency,
                    connection_timeout=timeout_s,
                    network_timeout=timeout_s,
                    **self._http_tls(),
                )
            )
            if self._headers:
                control = WithHeaders(control, self._headers)
            self._conns = Connections(control, http=HttpConnections(url, timeout_s, security))
        else:
            self._conns = Connections(self._grpc_control(), grpc=GrpcInfer(url, security))
        # Dropping the client closes what it holds, at once and without the collector.
        self._release = weakref.finalize(self, self._conns.close)
        _LIVE.add(self)
        log.debug("%r", self)

    @property
    def id(self) -> str:
        """The test id: `http`, `grpc`, `http-shm`, `grpc-cuda-shm`."""
        return self.protocol + ID_SUFFIX[self.shared_memory]

    def __repr__(self) -> str:
        return (
            f"TritonClient({self.protocol}://{self.url}, shared_memory={self.shared_memory}, "
            f"{self.path})"
        )

    def release_idle(self) -> None:
        """Close the keep-alive connections no request is using; the next request or call
        opens new ones."""
        for pool in (self._conns.http, self._conns.h2):
            if pool is not None:
                pool.close_idle()
        if self.protocol == "http":
            self._conns.control.close()  # PerThreadControl: a thread's next call makes a new one
        else:
            control, self._conns.control = self._conns.control, self._grpc_control()
            control.close()

    def close(self) -> None:
        """Unregister and unlink its shared memory, close its connections; idempotent."""
        with self._lock:
            memory, self._memory = self._memory, None
        try:
            if memory is not None:
                memory.close()
        finally:
            self._release()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors (request_errors says what each failure means) ----------------------------


_LIVE: weakref.WeakSet[TritonClient] = weakref.WeakSet()
