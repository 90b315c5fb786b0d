"""Prepared HTTP requests over keep-alive connections.

A request is built once into the exact bytes of an HTTP/1.1 POST (request line, headers and
tritonclient's binary-tensor body) and written with one sendall; the answer is read no
further than its status line, its length headers and its body. Under Locust the socket module
is gevent's (monkey patching), so the same code waits cooperatively there and blocks in
pytest's threads.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass

from tritonclient.utils import InferenceServerException

HEADER_END = b"\r\n\r\n"
RECV_BYTES = 65536
MAX_HEADER_BYTES = 64 * 1024


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: bytes | bytearray
    header_length: int | None  # Inference-Header-Content-Length: the JSON part of a binary body
    content_encoding: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200


def request_bytes(hostport: str, path: str, body: bytes, json_size: int | None) -> bytes:
    """The whole HTTP/1.1 request, as tritonclient's infer() would send it."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {hostport}",
             "Content-Type: application/octet-stream", f"Content-Length: {len(body)}"]
    if json_size is not None:
        lines.append(f"Inference-Header-Content-Length: {json_size}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Connection:
    def __init__(self, hostport: str, timeout_s: float) -> None:
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reused = False  # came back from the idle list: the server may have closed it
        self.answered = False  # some of a reply arrived

    def exchange(self, data: bytes) -> tuple[HttpReply, bool]:
        """Send one request and read its reply; (reply, whether the server keeps the
        connection open)."""
        self.answered = False
        # One send() takes a small request whole; gevent's sendall() would first ask the
        # kernel for the send buffer size (one more syscall per request).
        sent = self.sock.send(data)
        if sent < len(data):
            self.sock.sendall(memoryview(data)[sent:])
        buffer = bytearray()
        while (end := buffer.find(HEADER_END)) < 0:
            if len(buffer) > MAX_HEADER_BYTES:
                raise ConnectionError("malformed HTTP reply: no end of headers")
            self._recv_into(buffer)
        head = bytes(buffer[:end]).decode("latin-1")
        status_line, _, header_text = head.partition("\r\n")
        try:
            status = int(status_line.split(" ", 2)[1])
        except (IndexError, ValueError):
            raise ConnectionError(f"malformed HTTP status line {status_line[:80]!r}") from None
        length = header_length = None
        encoding = connection = None
        for line in header_text.split("\r\n"):
            name, _, value = line.partition(":")
            key = name.strip().lower()
            if key == "content-length":
                length = int(value)
            elif key == "inference-header-content-length":
                header_length = int(value)
            elif key == "content-encoding":
                encoding = value.strip()
            elif key == "connection":
                connection = value.strip().lower()
            elif key == "transfer-encoding" and value.strip().lower() != "identity":
                raise ConnectionError(f"unexpected Transfer-Encoding {value.strip()!r} in a "
                                      "Triton reply (expected a Content-Length)")
        if length is None:
            raise ConnectionError("HTTP reply without Content-Length")
        start = end + len(HEADER_END)
        got = len(buffer) - start
        if got > length:
            raise ConnectionError("HTTP reply longer than its Content-Length")
        body = bytearray(length)
        body[:got] = buffer[start:]
        view = memoryview(body)
        while got < length:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionResetError("the server closed the connection mid-reply")
            got += n
        return HttpReply(status, body, header_length, encoding), connection != "close"

    def _recv_into(self, buffer: bytearray) -> None:
        chunk = self.sock.recv(RECV_BYTES)
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        self.answered = True
        buffer += chunk

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class HttpConnections:
    """Keep-alive connections to one server, one per request in flight."""

    def __init__(self, hostport: str, timeout_s: float) -> None:
        self.hostport = hostport
        self.timeout_s = timeout_s
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()
        self.closed = False

    def exchange(self, data: bytes) -> HttpReply:
        """One request, one reply. A kept-alive connection the server has closed meanwhile
        fails before any reply: that request is sent once more on a new connection."""
        connection = self._take()
        try:
            try:
                reply, keep = connection.exchange(data)
            except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
                if not connection.reused or connection.answered:
                    raise
                connection.close()
                connection = _Connection(self.hostport, self.timeout_s)
                reply, keep = connection.exchange(data)
        except BaseException:
            connection.close()
            raise
        if keep and not self.closed:
            connection.reused = True
            with self._lock:
                self._idle.append(connection)
        else:
            connection.close()
        return reply

    def _take(self) -> _Connection:
        with self._lock:
            if self.closed:
                raise ConnectionError("client closed")
            if self._idle:
                return self._idle.pop()
        return _Connection(self.hostport, self.timeout_s)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def raise_for_status(reply: HttpReply) -> None:
    """Triton's error JSON as tritonclient reports it: InferenceServerException(message,
    HTTP status)."""
    if reply.ok:
        return
    import json

    text = bytes(reply.body).decode("utf-8", errors="replace")
    try:
        message = json.loads(text)["error"] if text else \
            "client received an empty response from the server."
    except (ValueError, KeyError, TypeError):
        message = f"unexpected reply from the server: {text[:300]!r}"
    raise InferenceServerException(msg=str(message), status=str(reply.status))
