"""The keep-alive connections of one client to one server: the HTTP/1.1 and the HTTP/2 (gRPC)
paths keep one connection per request in flight, park them here between requests, and send a
request the server never took once more on a new connection."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

R = TypeVar("R")
DROPPED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


class Connection(Protocol):
    reused: bool  # came back from the idle list: the server may have closed it meanwhile

    def close(self) -> None: ...


C = TypeVar("C", bound=Connection)


class IdleConnections(Generic[C]):
    """The parked ones wait in a deque, whose append and pop are atomic: no lock on the way
    of every request, from greenlets or threads alike."""

    def __init__(self) -> None:
        self._idle: collections.deque[C] = collections.deque()
        self.closed = False

    def __len__(self) -> int:
        return len(self._idle)

    def parked(self) -> list[C]:
        return list(self._idle)

    def take(self, make: Callable[[], C], usable: Callable[[C], bool] = lambda _: True) -> C:
        """An idle connection still usable, else a new one."""
        if self.closed:
            raise ConnectionError("client closed")
        while True:
            try:
                connection = self._idle.pop()
            except IndexError:
                return make()
            if usable(connection):
                return connection
            connection.close()

    def exchange_on(
        self,
        connect: Callable[[], C],
        send: Callable[[C], tuple[R, bool]],
        may_resend: Callable[[C, Exception], bool],
        usable: Callable[[C], bool] = lambda _: True,
    ) -> R:
        """`send` one request on a parked connection or a new one; (its answer, whether the
        connection may be parked again). A request dropped before the server took it
        (`may_resend`: a kept-alive connection the server closed meanwhile) is sent once more
        on a new connection; when none can be made the server is gone, and the drop is what
        is reported."""
        connection = self.take(connect, usable)
        try:
            try:
                answer, keep = send(connection)
            except DROPPED as dropped:
                if not may_resend(connection, dropped):
                    raise
                connection.close()
                try:
                    connection = connect()
                except OSError:
                    raise dropped from None
                answer, keep = send(connection)
        except BaseException:
            connection.close()
            raise
        self.give_back(connection, keep)
        return answer

    def give_back(self, connection: C, keep: bool) -> None:
        """Park a connection for the next request, or close it (`keep` false, or the client
        closed, also while this request was out)."""
        if keep and not self.closed:
            connection.reused = True
            self._idle.append(connection)
            if self.closed:
                self.close_idle()
        else:
            connection.close()

    def close_idle(self) -> None:
        """Close the parked connections (the client stays usable: the next request opens
        a new one)."""
        while True:
            try:
                connection = self._idle.pop()
            except IndexError:
                return
            connection.close()

    def close(self) -> None:
        self.closed = True
        self.close_idle()
