"""One connection of a client, driven from outside: for a load driver that waits on many
sockets at once (load/runner/multiplexer.py) instead of one greenlet per request in flight.

send() starts a prepared request, readable() takes what has arrived once the driver saw the
socket readable and gives the answer's size when it is whole. The request and its reading are
the connections' own (http_conn, grpc_h2: the same bytes as TritonClient.send_status), and a
failure comes out as the client's: `failure` turns what the socket or the server said into
the InferenceError or ServerError a blocking send would raise. A failed connection is dropped
and the next send() opens a new one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from tritonclient.utils import InferenceServerException

from pytest_triton.client.wire.grpc_h2 import GrpcConnections, Http2Connection
from pytest_triton.client.wire.http_conn import HttpConnection, raise_for_status
from pytest_triton.client.wire.request import PreparedRequest, RawAnswer, answer_size

Failure = Callable[[PreparedRequest, Exception], Exception]


class Stepped(Protocol):
    def advance(self, ready: bool = False) -> bool: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...


C = TypeVar("C", bound=Stepped)


class Lane(ABC, Generic[C]):
    """A connection with at most one request in flight, for one driver greenlet."""

    def __init__(self, failure: Failure) -> None:
        self._failure = failure
        self._connection: C | None = None
        self._request: PreparedRequest | None = None
        self.answered: tuple[PreparedRequest, RawAnswer] | None = None
        """The last whole answer and its request (kept until the next one is whole, not
        decoded): for a driver that checks answers."""

    def send(self, request: PreparedRequest) -> bool:
        """Start `request`; True when it went out on a new connection, whose fileno() the
        driver watches from then on (the old one is closed)."""
        fresh = self._connection is None
        self._request = request
        try:
            if self._connection is None:
                self._connection = self._connect()
            self._begin(self._connection, request)
        except Exception as exc:
            self.close()
            raise self._failure(request, exc) from None
        return fresh

    def fileno(self) -> int:
        assert self._connection is not None, "no connection before the first send()"
        return self._connection.fileno()

    def readable(self) -> int | None:
        """Take what arrived; None while the answer is incomplete, else its size in bytes as it
        came over the wire. A rejection or a failed connection raises as the client's send
        would."""
        connection, request = self._connection, self._request
        assert connection is not None and request is not None, "readable() before send()"
        try:
            if not connection.advance(ready=True):
                return None
            raw = self._finish(connection)
        except Exception as exc:
            # a rejection leaves the connection as good as it was
            if not (isinstance(exc, InferenceServerException) and self._keeps(connection)):
                self.close()
            raise self._failure(request, exc) from None
        self.answered = (request, raw)
        return answer_size(raw)

    def expire(self) -> Exception:
        """The request in flight took longer than the client's timeout: drop its connection
        and say so as a blocking send's socket timeout would."""
        request = self._request
        assert request is not None
        self.close()
        return self._failure(request, TimeoutError("timed out"))

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    # -- what differs between the protocols ------------------------------------------------
    @abstractmethod
    def _connect(self) -> C: ...

    @abstractmethod
    def _begin(self, connection: C, request: PreparedRequest) -> None: ...

    @abstractmethod
    def _finish(self, connection: C) -> RawAnswer:
        """The whole answer; an error answer raises InferenceServerException, and a
        connection that must not carry another request is closed."""
        ...

    def _keeps(self, connection: C) -> bool:
        """Whether a connection that answered with a rejection still serves this lane."""
        return self._connection is connection


class HttpLane(Lane[HttpConnection]):
    def __init__(self, hostport: str, timeout_s: float, failure: Failure) -> None:
        super().__init__(failure)
        self.hostport = hostport
        self.timeout_s = timeout_s

    def _connect(self) -> HttpConnection:
        return HttpConnection(self.hostport, self.timeout_s)

    def _begin(self, connection: C, request: PreparedRequest) -> None:
        assert isinstance(connection, HttpConnection)
        connection.begin(request.wire)

    def _finish(self, connection: HttpConnection) -> RawAnswer:
        reply, keep = connection.reply()
        if not keep:
            self.close()
        raise_for_status(reply)
        return reply


class GrpcLane(Lane[Http2Connection]):
    def __init__(self, connections: GrpcConnections, failure: Failure) -> None:
        super().__init__(failure)
        self.server = connections.server

    def _connect(self) -> Http2Connection:
        return Http2Connection(self.server)

    def _begin(self, connection: C, request: PreparedRequest) -> None:
        assert isinstance(connection, Http2Connection) and request.frames is not None
        connection.begin(request.frames)

    def _finish(self, connection: Http2Connection) -> RawAnswer:
        if not connection.usable:  # GOAWAY, or out of stream ids
            self.close()
        return connection.result()
