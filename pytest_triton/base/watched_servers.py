"""Servers this process started and watches, found by their address.

A launcher's server knows when it died (its watcher saw the process or container exit); a
TritonClient made from a bare URL does not. Launchers note each server here under its HTTP and
gRPC addresses, so that a client made later for one of them (a user's own
`TritonClient("127.0.0.1:8000")`, a Locust user beside its embedded server) asks the server
itself and fails at once with how it died instead of a connection error or a timeout.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Protocol

LOOPBACK_ALIASES = {"localhost": "127.0.0.1"}  # our servers bind 127.0.0.1


class ServerHealth(Protocol):
    """What a client may ask about the server it talks to (a launcher's RunningServer; its
    optional `host_memory` and `cuda_memory` say whether it maps this machine's /dev/shm and
    CUDA memory, None when unknown)."""

    def raise_if_dead(self) -> None:
        """Raise the ServerError of a server that died; free enough to call before every
        request."""

    def check_alive(self, wait_s: float = 0.0) -> None:
        """After a failed request: raise the ServerError of a server that died or was stopped,
        waiting up to `wait_s` for a dying one to be reaped."""


_watched: weakref.WeakValueDictionary[str, ServerHealth] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def address_key(url: str) -> str:
    """'http://localhost:8000/' and '127.0.0.1:8000' name the same server."""
    text = url.split("://", 1)[-1].split("/", 1)[0].strip().lower()
    host, sep, port = text.rpartition(":")
    if not sep:
        return text
    return f"{LOOPBACK_ALIASES.get(host, host)}:{port}"


def remember(addresses: Iterable[str], server: ServerHealth) -> None:
    """Note a server under each of its addresses; a later server on a reused port replaces it,
    and a server nobody holds any more is forgotten."""
    with _lock:
        for address in addresses:
            if address:
                _watched[address_key(address)] = server


def find(url: str) -> ServerHealth | None:
    """The watched server at this address, if this process started one there."""
    with _lock:
        return _watched.get(address_key(url))
