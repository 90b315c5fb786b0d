"""The operating system's socket under gevent's, for the calls of a load driver that never
wait: a send that fits in the socket's buffer, a read of what epoll said has arrived. gevent's
Python wrapper around each costs about a microsecond, paid on every request of a load.
"""

from __future__ import annotations

import socket

from pytest_triton.base.security import Security


def raw_socket(sock: socket.socket, security: Security) -> socket.socket:
    """The operating system's socket under gevent's, where no TLS sits between them: for
    calls that need no gevent wait (a send that fits, a read of what has arrived), without
    gevent's Python wrapper (about a microsecond a call). Elsewhere the socket itself."""
    if security.tls:
        return sock
    raw: socket.socket = getattr(sock, "_sock", sock)
    return raw


def send_some(raw: socket.socket, data: bytes) -> int:
    """What of `data` one send() on the raw socket took (nothing when its buffer is full)."""
    try:
        return raw.send(data)
    except BlockingIOError:
        return 0
