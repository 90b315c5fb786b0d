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

from pytest_triton.client.wire.grpc_h2 import (
    GrpcConnections,
    Http2Connection,
    SharedHttp2Connection,
    shared_connections,
)
from pytest_triton.client.wire.http_conn import (
    HttpConnection,
    HttpReply,
    raise_for_status,
    reply_of,
)
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

    @property
    def broken(self) -> bool:
        """Whether the request in flight failed with a connection another lane read (its
        driver then calls readable() to take the failure)."""
        return False

    def readable(self, read: bool = True) -> int | None:
        """Take what arrived; None while the answer is incomplete, else its size in bytes as it
        came over the wire. A rejection or a failed connection raises as the client's send
        would. `read=False`: another lane on the same connection has just read it."""
        connection, request = self._connection, self._request
        assert connection is not None and request is not None, "readable() before send()"
        try:
            if not self._advance(connection, read):
                return None
            raw = self._finish(connection)
        except Exception as exc:
            raise self._failed(connection, request, exc) from None
        self.answered = (request, raw)
        return answer_size(raw)

    def _failed(self, connection: C, request: PreparedRequest, exc: Exception) -> Exception:
        """The client's failure for `exc`; a rejection leaves the connection as good as it
        was, anything else closes it."""
        if not (isinstance(exc, InferenceServerException) and self._keeps(connection)):
            self.close()
        return self._failure(request, exc)

    def ready(self) -> bool:
        """Whether readable(read=False) may find something: on a shared connection another
        lane has just read, only lanes whose answer came (or whose connection failed)."""
        return True

    def hold(self) -> Callable[[], None] | None:
        """For a connection other lanes share: keep its sends until the returned release()
        (the driver's one send for the next requests after one read). None elsewhere."""
        return None

    def expire(self) -> Exception:
        """The request in flight took longer than the client's timeout: drop its connection
        and say so as a blocking send's socket timeout would."""
        request = self._request
        assert request is not None
        return self.fail(request, TimeoutError("timed out"))

    def fail(self, request: PreparedRequest, exc: Exception) -> Exception:
        """The client's failure for what the connection met (a timeout, a closed or failed
        socket the C pump read): the connection is dropped."""
        self.close()
        return self._failure(request, exc)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    # -- what differs between the protocols ------------------------------------------------
    def _advance(self, connection: C, read: bool) -> bool:
        """Take what arrived; whether this lane's answer is whole."""
        return connection.advance(ready=True)

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
    """A plain HTTP connection: its answers may also be read by the multiplexer's C pump
    (_http_pump.c), which hands what it does not handle itself to take() and fail()."""

    def __init__(self, hostport: str, timeout_s: float, failure: Failure) -> None:
        super().__init__(failure)
        self.hostport = hostport
        self.timeout_s = timeout_s

    def take(self, request: PreparedRequest, head: bytes, body: bytes) -> HttpReply:
        """An answer the pump read whole, as readable() would take it: the reply, or the
        client's failure raised (a rejection, a malformed head)."""
        connection = self._connection
        assert connection is not None, "take() without a connection"
        try:
            reply, keep = reply_of(head, body)
            if not keep:
                self.close()
            raise_for_status(reply)
        except Exception as exc:
            raise self._failed(connection, request, exc) from None
        self.answered = (request, reply)
        return reply

    def send_rest(self, data: bytes, sent: int) -> None:
        """What of a request the pump's one send() left (a full socket buffer), waiting."""
        assert self._connection is not None, "send_rest() without a connection"
        self._connection.sock.sendall(memoryview(data)[sent:])

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


class SharedGrpcLane(Lane[SharedHttp2Connection]):
    """A user's stream on its process's one HTTP/2 connection to the server, which every
    such lane to that server shares (as a gRPC client's cached channel: perf_analyzer's
    contexts share one). A reset stream fails its own request; a failed connection fails
    every request on it, and the next send opens a new one."""

    def __init__(self, connections: GrpcConnections, failure: Failure) -> None:
        super().__init__(failure)
        self._shared = shared_connections(connections.server)
        self._stream = 0

    @property
    def broken(self) -> bool:
        connection = self._connection
        return connection is not None and self._shared.failure_of(connection) is not None

    def ready(self) -> bool:
        connection = self._connection
        return (
            connection is None
            or connection.ended(self._stream)
            or self._shared.failure_of(connection) is not None
        )

    def hold(self) -> Callable[[], None] | None:
        connection = self._connection
        if connection is None:
            return None
        connection.hold()

        def release() -> None:
            try:
                connection.release()
            except Exception as exc:  # the connection is gone for every lane on it
                self._shared.fail(connection, exc)

        return release

    def expire(self) -> Exception:
        """Only this lane's stream is given up: the connection carries the others'."""
        request, connection = self._request, self._connection
        assert request is not None
        if connection is not None:
            connection.cancel(self._stream)
        return self._failure(request, TimeoutError("timed out"))

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.cancel(self._stream)
            self._shared.detach(connection)

    def _connect(self) -> SharedHttp2Connection:
        return self._shared.attach()

    def _begin(self, connection: C, request: PreparedRequest) -> None:
        assert isinstance(connection, SharedHttp2Connection) and request.frames is not None
        try:
            self._stream = connection.open_stream(request.frames)
        except Exception as exc:  # the connection is gone for every lane on it
            self._shared.fail(connection, exc)
            raise

    def _advance(self, connection: SharedHttp2Connection, read: bool) -> bool:
        failure = self._shared.failure_of(connection)
        if failure is not None:  # another lane read the connection's failure
            raise failure
        if read:
            try:
                connection.receive(ready=True)
            except Exception as exc:
                self._shared.fail(connection, exc)
                raise
        return connection.ended(self._stream)

    def _finish(self, connection: SharedHttp2Connection) -> RawAnswer:
        if not connection.usable:  # GOAWAY, or out of stream ids: new streams go elsewhere
            self._shared.retire(connection)
        return connection.take(self._stream)
