"""Prepared HTTP requests over keep-alive connections.

A request is built once into the exact bytes of an HTTP/1.1 POST (request line, headers and
tritonclient's binary-tensor body) and written with one sendall; the answer is read no
further than its status line, its length headers and its body. Under Locust the socket module
is gevent's (monkey patching), so the same code waits cooperatively there and blocks in
pytest's threads.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import Mapping
from typing import NamedTuple

from tritonclient.utils import InferenceServerException

from pytest_triton.base.security import PLAIN, Security
from pytest_triton.client.wire.idle import IdleConnections
from pytest_triton.client.wire.raw_socket import raw_socket, send_some

HEADER_END = b"\r\n\r\n"
RECV_BYTES = 65536


class HttpReply(NamedTuple):
    status: int
    body: bytes | bytearray
    header_length: int | None  # Inference-Header-Content-Length: the JSON part of a binary body
    content_encoding: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200


class Head(NamedTuple):
    """What a reply's head says that the reading needs."""

    status: int
    size: int  # Content-Length
    json_size: int | None  # Inference-Header-Content-Length
    encoding: str | None
    keep_alive: bool

    def reply(self, body: bytes | bytearray) -> tuple[HttpReply, bool]:
        """The reply with this head and `body`; whether the server keeps the connection."""
        return HttpReply(self.status, body, self.json_size, self.encoding), self.keep_alive


def request_bytes(
    hostport: str,
    path: str,
    body: bytes,
    json_size: int | None,
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """The whole HTTP/1.1 request, as tritonclient's infer() would send it (with the
    client's extra headers, an auth token say)."""
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {hostport}",
        "Content-Type: application/octet-stream",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    if json_size is not None:
        lines.append(f"Inference-Header-Content-Length: {json_size}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _field(head: bytes, name: bytes) -> bytes | None:
    """A header's value from the lower-cased header block, or None."""
    at = head.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    at += len(name) + 3
    stop = head.find(b"\r\n", at)
    return head[at : stop if stop >= 0 else len(head)].strip()


@functools.lru_cache(maxsize=256)
def parse_head(head: bytes) -> Head:
    """A reply's head, up to its blank line. Triton's heads carry no date: the same answer
    has the same head every time, so each is parsed once."""
    lowered = head.lower()
    if not lowered.startswith(b"http/1.") or not lowered[9:12].isdigit():
        raise ConnectionError(f"malformed HTTP status line {head[:80]!r}")
    length = _field(lowered, b"content-length")
    if length is None:
        raise ConnectionError("HTTP reply without Content-Length")
    transfer = _field(lowered, b"transfer-encoding")
    if transfer not in (None, b"identity"):
        raise ConnectionError(
            f"unexpected Transfer-Encoding {transfer!r} in a Triton reply "
            "(expected a Content-Length)"
        )
    json_size = _field(lowered, b"inference-header-content-length")
    encoding = _field(lowered, b"content-encoding")
    return Head(
        int(lowered[9:12]),
        int(length),
        int(json_size) if json_size is not None else None,
        encoding.decode("latin-1") if encoding is not None else None,
        _field(lowered, b"connection") != b"close",
    )


def reply_of(head: bytes, body: bytes | bytearray) -> tuple[HttpReply, bool]:
    """A reply read whole elsewhere (the load multiplexer's C pump): (reply, whether the
    server keeps the connection open)."""
    parsed = parse_head(head)
    if len(body) > parsed.size:
        raise ConnectionError("HTTP reply longer than its Content-Length")
    return parsed.reply(body)


class HttpConnection:
    """One keep-alive connection, one request at a time: begin() sends, advance() takes what
    has arrived, reply() reads the whole answer. exchange() runs the three in a row; a load
    driver waiting on many sockets at once calls advance() when this one is readable."""

    def __init__(self, hostport: str, timeout_s: float, security: Security = PLAIN) -> None:
        host, port = hostport.rsplit(":", 1)
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = security.wrap(sock, host.strip("[]"))
        self.raw = raw_socket(self.sock, security)
        self.buffer = bytearray(RECV_BYTES)  # reused: what a reply's first reads land in
        self.view = memoryview(self.buffer)
        self.reused = False  # came back from the idle list: the server may have closed it
        self.answered = False  # some of a reply arrived
        self.filled = 0  # bytes of the head (and the body's start) in the buffer
        self.head: Head | None = None  # once whole
        self.body: bytearray | None = None  # allocated once the head says its size
        self.got = 0  # bytes of the body received

    def exchange(self, data: bytes) -> tuple[HttpReply, bool]:
        """Send one request and read its reply; (reply, whether the server keeps the
        connection open)."""
        self.begin(data)
        while not self.advance():
            pass
        return self.reply()

    def begin(self, data: bytes) -> None:
        sock = self.sock
        self.answered = False
        self.filled = self.got = 0
        self.body = None
        # One send() takes a small request whole; gevent's sendall() would first ask the
        # kernel for the send buffer size (one more syscall per request).
        sent = send_some(self.raw, data)
        if sent < len(data):
            sock.sendall(memoryview(data)[sent:])

    def advance(self, ready: bool = False) -> bool:
        """One receive; whether the reply is whole. `ready`: the caller's epoll saw the socket
        readable, so it is read without gevent's wait."""
        recv_into = self.raw.recv_into if ready else self.sock.recv_into
        body = self.body
        try:
            if body is not None:
                n = recv_into(memoryview(body)[self.got :])
                if n == 0:
                    raise ConnectionResetError("the server closed the connection mid-reply")
                self.got += n
                return self.got >= len(body)
            n = recv_into(self.view[self.filled :])
        except BlockingIOError:  # readiness that was not (ready only)
            return False
        if n == 0:
            raise ConnectionResetError("the server closed the connection")
        self.answered = True
        self.filled += n
        return self._head_read()

    def _head_read(self) -> bool:
        """Once the head is whole: the body's size, and whether it is all here too."""
        buffer, filled = self.buffer, self.filled
        end = buffer.find(HEADER_END, 0, filled)
        if end < 0:
            if filled == len(buffer):
                raise ConnectionError(
                    f"malformed HTTP reply: no end of headers in {len(buffer)} bytes"
                )
            return False
        head = self.head = parse_head(bytes(buffer[:end]))
        start = end + len(HEADER_END)
        got = filled - start
        if got > head.size:
            raise ConnectionError("HTTP reply longer than its Content-Length")
        body = self.body = bytearray(head.size)
        body[:got] = self.view[start:filled]
        self.got = got
        return got >= head.size

    def reply(self) -> tuple[HttpReply, bool]:
        """The whole reply advance() read; (reply, whether the server keeps the connection
        open)."""
        head, body = self.head, self.body
        assert head is not None and body is not None
        return head.reply(body)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class HttpConnections(IdleConnections[HttpConnection]):
    """Keep-alive connections to one server, one per request in flight."""

    def __init__(self, hostport: str, timeout_s: float, security: Security = PLAIN) -> None:
        super().__init__()
        self.hostport = hostport
        self.timeout_s = timeout_s
        self.security = security

    def exchange(self, data: bytes) -> HttpReply:
        """One request, one reply; a kept-alive connection the server has closed meanwhile
        fails before any reply, and the request goes once more on a new connection."""
        return self.exchange_on(self._connect, lambda c: c.exchange(data), _not_answered)

    def _connect(self) -> HttpConnection:
        return HttpConnection(self.hostport, self.timeout_s, self.security)


def _not_answered(connection: HttpConnection, _: Exception) -> bool:
    return connection.reused and not connection.answered


def raise_for_status(reply: HttpReply) -> None:
    """Triton's error JSON as tritonclient reports it: InferenceServerException(message,
    HTTP status)."""
    if reply.ok:
        return
    import json

    text = bytes(reply.body).decode("utf-8", errors="replace")
    try:
        message = (
            json.loads(text)["error"]
            if text
            else "client received an empty response from the server."
        )
    except (ValueError, KeyError, TypeError):
        message = f"unexpected reply from the server: {text[:300]!r}"
    raise InferenceServerException(msg=str(message), status=str(reply.status))
