"""The idle keep-alive connections of one client: the HTTP/1.1 and the HTTP/2 (gRPC) paths
keep one connection per request in flight and park them here between requests."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Connection(Protocol):
    reused: bool  # came back from the idle list: the server may have closed it meanwhile

    def close(self) -> None: ...


C = TypeVar("C", bound=Connection)


class IdleConnections(Generic[C]):
    """A deque, whose append and pop are atomic: no lock on the way of every request, from
    greenlets or threads alike."""

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
