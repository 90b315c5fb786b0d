"""What one TritonClient holds open to its server, closed together.

The client owns these parts and closes them itself, at close() or when the last reference
to the client goes (a weakref finalizer: no garbage collection needed), instead of leaving
each to its library's destructor. gRPC channels are the exception to "closed means gone":
grpcio's Channel.close() returns before its socket is shut, which one of grpcio's own
threads does a moment later (seen with strace: shutdown() and close() of the channel's fd
from another thread after the drop returned), so a closed channel's connection may be
seen open for that moment.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pytest_triton.client.wire import grpc_h2
from pytest_triton.client.wire.grpc_call import GrpcInfer
from pytest_triton.client.wire.http_conn import HttpConnections

SENDER_THREADS = 64
"""Requests infer_many keeps in flight at once."""


@dataclass
class Connections:
    """The control client (tritonclient's, per protocol), the HTTP/1.1 keep-alive pool, the
    gRPC channel for prepared requests and the direct HTTP/2 pool (made on first use)."""

    control: Any
    http: HttpConnections | None = None
    grpc: GrpcInfer | None = None
    h2: grpc_h2.GrpcConnections | None = None
    senders: ThreadPoolExecutor | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sender_threads(self) -> ThreadPoolExecutor:
        """The threads infer_many sends on, kept for the client's life: a pool made per call
        left each ended thread's own HTTP client (and its sockets) open until close(), so a
        long-lived client gathered hundreds of descriptors."""
        with self._lock:
            if self.senders is None:
                self.senders = ThreadPoolExecutor(
                    max_workers=SENDER_THREADS, thread_name_prefix="pytest-triton-send"
                )
            return self.senders

    def close(self) -> None:
        """Close every part, each even when another fails; idempotent."""
        with self._lock:
            senders, self.senders = self.senders, None
        if senders is not None:
            senders.shutdown(wait=False, cancel_futures=True)
        for part in (self.http, self.grpc, self.h2, self.control):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.close()
