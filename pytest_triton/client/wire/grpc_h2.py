"""Prepared gRPC requests over plain HTTP/2 connections: the direct HTTP/2 gRPC path, as
http_conn.py is for HTTP/1.1.

grpcio under gevent costs hundreds of microseconds of CPU per request (its C core's
completion queue polled through gevent's thread pool); a unary ModelInfer needs little of
HTTP/2, so here it is spoken directly on a socket (gevent's under Locust, a plain one in
threads):

- a blocking caller takes a connection of its own per request in flight, from an idle pool
  (GrpcConnections, one stream at a time on each); the load multiplexer's lanes share one
  connection as concurrent streams of it (SharedHttp2Connection); the client preface asks
  for no HPACK dynamic table (so the server's header blocks are the same bytes every time)
  and for windows large enough that answers never wait for a WINDOW_UPDATE;
- the HEADERS block (path, authority, grpc-timeout) is encoded once per client with `hpack`,
  the DATA frame once per request (GrpcFrames); a send writes both with one send(), only the
  stream id patched in;
- the answer's frames are read no further than its DATA (the message) and its trailers'
  grpc-status; a header block seen before is not decoded again;
- requests larger than the server's windows or frame size go out in frames as the windows
  allow: what does not fit waits in the connection (`outgoing`) and goes out as the
  server's WINDOW_UPDATEs are read, by whoever reads them. A send never waits for a read:
  on a shared connection the load driver is the one reader (a send that read the socket
  itself took the answers and window updates other streams waited for, and a run stalled).

Failures read as the channel path's: a non-zero grpc-status is tritonclient's
InferenceServerException(grpc-message, "StatusCode.X"); a reset, a GOAWAY before our stream
or an end of connection mid-answer is a ConnectionResetError (a dropped request); a socket
timeout is a TimeoutError.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import unquote

import grpc
from tritonclient.utils import InferenceServerException

from pytest_triton.base.security import PLAIN, Security
from pytest_triton.client.wire.grpc_call import MODEL_INFER
from pytest_triton.client.wire.idle import IdleConnections
from pytest_triton.client.wire.raw_socket import raw_socket, send_some

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
(
    DATA,
    HEADERS,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    PUSH_PROMISE,
    PING,
    GOAWAY,
    WINDOW_UPDATE,
    CONTINUATION,
) = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535  # before the peer's SETTINGS say otherwise
DEFAULT_FRAME = 16384  # the frame size every HTTP/2 peer must accept
RECEIVE_FRAME = 1 << 20  # the largest frame we let the server send
MAX_STREAM_ID = 2**31 - 1
RECV_BYTES = 65536
(
    SETTINGS_HEADER_TABLE_SIZE,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_FRAME_SIZE,
) = 1, 2, 4, 5
STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}
KNOWN_BLOCKS = 64  # distinct error-free header blocks remembered per client
REFUSED_STREAM, CANCEL = 7, 8  # RST_STREAM error codes
FRAME_HEAD = struct.Struct(">BHBBI")  # length (24 bits), type, flags, stream id
_DATA_END_STREAM = bytes((DATA, END_STREAM))
_PLAIN_BLOCK = END_HEADERS | PADDED | PRIORITY_FLAG


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def client_preface() -> bytes:
    """Preface, SETTINGS (no dynamic table, no push, the largest stream window, 1 MiB frames)
    and the connection window raised to the largest too."""
    settings = b"".join(
        key.to_bytes(2, "big") + value.to_bytes(4, "big")
        for key, value in (
            (SETTINGS_HEADER_TABLE_SIZE, 0),
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW),
            (SETTINGS_MAX_FRAME_SIZE, RECEIVE_FRAME),
        )
    )
    return (
        PREFACE
        + frame(SETTINGS, 0, 0, settings)
        + frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big"))
    )


def grpc_timeout(seconds: float) -> str:
    """The grpc-timeout header's value: at most 8 digits and a unit."""
    millis = max(1, round(seconds * 1000))
    return f"{millis}m" if millis < 10**8 else f"{min(round(seconds), 10**8 - 1)}S"


def request_headers(
    hostport: str,
    timeout_s: float | None,
    extra: Mapping[str, str] | None = None,
    scheme: str = "http",
) -> bytes:
    """The HEADERS block of every ModelInfer of one client (with its extra headers, lower-
    cased as HTTP/2 wants them). Fields are never indexed, so the block needs no state of the
    server's decoder and is the same on every stream."""
    from hpack import Encoder, NeverIndexedHeaderTuple

    fields = [
        (":method", "POST"),
        (":scheme", scheme),
        (":path", MODEL_INFER),
        (":authority", hostport),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("user-agent", "pytest-triton"),
    ]
    if timeout_s is not None:
        fields.append(("grpc-timeout", grpc_timeout(timeout_s)))
    fields += [(name.lower(), value) for name, value in (extra or {}).items()]
    return bytes(Encoder().encode([NeverIndexedHeaderTuple(k, v) for k, v in fields]))


@dataclass(frozen=True)
class GrpcFrames:
    """A ModelInferRequest as HTTP/2 DATA, built once: its gRPC length prefix and, when it
    fits in one frame any peer accepts, that frame's head (END_STREAM set). The message is the
    prepared request's own bytes, not a copy."""

    message: bytes
    prefix: bytes
    single_head: bytes | None

    @classmethod
    def of(cls, message: bytes) -> GrpcFrames:
        size = len(message) + 5
        prefix = b"\x00" + len(message).to_bytes(4, "big")
        head = (
            size.to_bytes(3, "big") + bytes((DATA, END_STREAM)) if size <= DEFAULT_FRAME else None
        )
        return cls(message, prefix, head)

    @property
    def size(self) -> int:
        return len(self.message) + 5


class _Unprocessed(ConnectionResetError):
    """The server refused or dropped a stream it says it never processed (GOAWAY before
    it, REFUSED_STREAM): safe to send again on a new connection."""


class _Outgoing:
    """The part of a request's DATA that the server's windows did not let out yet."""

    __slots__ = ("left", "pieces", "stream", "window")

    def __init__(self, stream: int, pieces: list[memoryview], window: int) -> None:
        self.stream = stream
        self.pieces = pieces
        self.left = sum(len(p) for p in pieces)
        self.window = window  # the stream's send window

    def take(self, size: int) -> bytes:
        """The next `size` bytes."""
        parts = []
        while size:
            piece = self.pieces[0]
            part = piece[:size]
            parts.append(part)
            size -= len(part)
            self.left -= len(part)
            if len(part) == len(piece):
                self.pieces.pop(0)
            else:
                self.pieces[0] = piece[len(part) :]
        return b"".join(parts)


class _Answer:
    """What one stream has received so far."""

    __slots__ = ("ended", "error", "headers", "parts", "received", "trailers")

    def __init__(self) -> None:
        self.error: Exception | None = None  # the stream's own failure (a shared connection)
        self.parts: list[bytes] = []
        self.headers: dict[str, str] | None = None
        self.trailers: dict[str, str] | None = None
        self.ended = False
        self.received = 0


@dataclass(frozen=True)
class _Server:
    """What every connection to one server shares. Connections hold this, not their pool: a
    pool <-> connection cycle kept a dropped client's sockets open until the garbage
    collector ran, and Triton's graceful stop waited for them (15 s instead of 3)."""

    hostport: str
    timeout_s: float | None
    headers_head: bytes
    headers_block: bytes
    known_blocks: dict[bytes, dict[str, str]]
    security: Security = PLAIN

    @classmethod
    def at(cls, hostport: str, timeout_s: float | None, security: Security = PLAIN) -> _Server:
        scheme = "https" if security.tls else "http"
        block = request_headers(hostport, timeout_s, security.header_values(), scheme)
        head = len(block).to_bytes(3, "big") + bytes((HEADERS, END_HEADERS))
        return cls(hostport, timeout_s, head, block, {}, security)


class Http2Connection:
    """One HTTP/2 connection, one stream at a time."""

    def __init__(self, server: _Server) -> None:
        from hpack import Decoder

        host, port = server.hostport.rsplit(":", 1)
        self.server = server
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=server.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = server.security.wrap(sock, host.strip("[]"), alpn=("h2",))
        self.raw = raw_socket(self.sock, server.security)
        self.decoder = Decoder()
        self.buffer = bytearray(RECV_BYTES)
        self.start = self.end = 0  # unread bytes: buffer[start:end]
        self.next_stream = 1
        self.send_window = DEFAULT_WINDOW  # the connection's, towards the server
        self.stream_window_initial = DEFAULT_WINDOW  # a new stream's (the server's SETTINGS)
        self.max_frame = DEFAULT_FRAME
        self.recv_window = MAX_WINDOW  # the connection's, towards us
        self.stream = 0
        self.answer = _Answer()
        self.block: list[bytes] = []  # a header block still awaiting its CONTINUATION
        self.block_ends_stream = False
        self.going_away = False
        self.reused = False
        self.preface: bytes | None = client_preface()  # sent with the first request
        self.held: list[bytes] | None = None  # frames kept for one send (hold())
        self.outgoing: list[_Outgoing] = []  # DATA waiting for the server's windows

    @property
    def usable(self) -> bool:
        return not self.going_away and self.next_stream <= MAX_STREAM_ID

    # -- a request -----------------------------------------------------------------------
    def exchange(self, frames: GrpcFrames) -> bytes:
        """Send one request on a new stream; the answer's message, or its failure raised."""
        self.begin(frames)
        while not self.advance():
            pass
        return self.result()

    def begin(self, frames: GrpcFrames) -> None:
        """Open a stream and send the request on it (exchange()'s first step; a load driver
        waiting on many sockets then calls advance() when this one is readable)."""
        stream = self.stream = self.next_stream
        self.next_stream += 2
        self.answer = _Answer()
        self._opened(stream, self.answer)
        sid = stream.to_bytes(4, "big")
        headers = self.server.headers_head + sid + self.server.headers_block
        size = frames.size
        window = self.stream_window_initial
        if size <= self.send_window and size <= window and size <= self.max_frame:
            # One DATA frame (the server's frame size allows it: Triton's, 4 MiB), and
            # the whole request in one send: the requests a load sends after one batch's
            # answers reach the server together, as a C++ client's do.
            head = frames.single_head or size.to_bytes(3, "big") + _DATA_END_STREAM
            data = b"".join(
                (self.preface or b"", headers, head, sid, frames.prefix, frames.message)
            )
            self.preface = None
            self.send_window -= size
            self._write(data)
        else:
            self._write((self.preface or b"") + headers)
            self.preface = None
            pieces = [memoryview(frames.prefix), memoryview(frames.message)]
            self.outgoing.append(_Outgoing(stream, pieces, window))
            self._flush()

    def _opened(self, stream: int, answer: _Answer) -> None:
        """A new stream's answer, before any of its DATA goes out (a shared connection
        keeps it by stream id)."""

    def hold(self) -> None:
        """Keep what is sent from now on until release(): the requests a load driver sends
        after one read's answers go out in one send(), as a C++ client's writes on a
        connection do (one system call, and one TCP segment for the server to read, where
        each request took its own)."""
        if self.held is None:
            self.held = []

    def release(self) -> None:
        """Send what hold() kept, in order."""
        held, self.held = self.held, None
        if held:
            self._write(held[0] if len(held) == 1 else b"".join(held))

    def _write(self, data: bytes) -> None:
        """Send `data` whole (one send() takes a small one; more waits in sendall), or keep
        it while held."""
        if self.held is not None:
            self.held.append(data)
            return
        sent = send_some(self.raw, data)
        if sent < len(data):
            self.sock.sendall(memoryview(data)[sent:])

    def advance(self, ready: bool = False) -> bool:
        """One receive; whether the answer is whole. `ready`: the caller's epoll saw the socket
        readable, so it is read without gevent's wait."""
        if not self.answer.ended:
            self._read(ready)
        return self.answer.ended

    def result(self) -> bytes:
        """The whole answer's message, or its failure raised."""
        return self._result(self.answer)

    def fileno(self) -> int:
        return self.sock.fileno()

    def _flush(self) -> None:
        """DATA of the waiting requests, oldest first, as far as the windows allow: no larger
        than the server's frame size, the last frame of each with END_STREAM. A request
        whose answer came already (the server rejected it early) or was given up sends no
        more."""
        for out in list(self.outgoing):
            answer = self._answer_for(out.stream)
            if answer is None or answer.ended:
                self.outgoing.remove(out)
                continue
            sid = out.stream.to_bytes(4, "big")
            while out.left:
                room = min(self.send_window, out.window, self.max_frame, out.left)
                if room <= 0:
                    break
                chunk = out.take(room)
                flags = END_STREAM if not out.left else 0
                self._write(len(chunk).to_bytes(3, "big") + bytes((DATA, flags)) + sid + chunk)
                self.send_window -= room
                out.window -= room
            if not out.left:
                self.outgoing.remove(out)
            if self.send_window <= 0:
                return

    def _result(self, answer: _Answer) -> bytes:
        trailers = answer.trailers or {}
        headers = answer.headers or {}
        status = headers.get(":status", trailers.get(":status"))
        if status != "200":
            raise ConnectionError(
                f"not a gRPC answer: HTTP status {status} from the server at {self.server.hostport}"
            )
        code = trailers.get("grpc-status")
        if code is None:
            raise ConnectionError(f"gRPC answer without grpc-status from {self.server.hostport}")
        if code != "0":
            raise grpc_status_error(code, trailers.get("grpc-message", ""), self.server.hostport)
        body = answer.parts[0] if len(answer.parts) == 1 else b"".join(answer.parts)
        if len(body) < 5 or body[0] != 0:
            raise ConnectionError(
                f"malformed gRPC message from {self.server.hostport} "
                f"({len(body)} bytes, flag {body[:1]!r})"
            )
        return body[5:]

    # -- reading frames -------------------------------------------------------------------
    def _read(self, ready: bool = False) -> None:
        """Receive what has arrived and handle every whole frame in it."""
        buffer = self.buffer
        if self.start == self.end:
            self.start = self.end = 0
        elif self.end == len(buffer):  # no room at the back: the partial frame goes first
            unread = buffer[self.start : self.end]
            need = self._pending_size()
            if need > len(buffer):
                self.buffer = buffer = bytearray(need)
            buffer[: len(unread)] = unread
            self.start, self.end = 0, len(unread)
        recv_into = self.raw.recv_into if ready else self.sock.recv_into
        try:
            n = recv_into(memoryview(buffer)[self.end :])
        except BlockingIOError:  # readiness that was not (ready only)
            return
        if n == 0:
            raise ConnectionResetError(
                "the server closed the connection "
                + ("mid-answer" if self.answer.received else "before answering")
            )
        self.answer.received += n
        self.end += n
        self._handle_frames()

    def _pending_size(self) -> int:
        """Bytes the partial frame at the buffer's front needs in all."""
        if self.end - self.start < 9:
            return 9
        return 9 + int.from_bytes(self.buffer[self.start : self.start + 3], "big")

    def _answer_for(self, sid: int) -> _Answer | None:
        """The answer a frame of stream `sid` belongs to, if it is one in flight."""
        return self.answer if sid == self.stream else None

    def _failed_stream(self, answer: _Answer, error: Exception) -> None:
        """A stream reset or not taken: here it fails the request being read."""
        raise error

    def _handle_frames(self) -> None:
        buffer, start, end = self.buffer, self.start, self.end
        while end - start >= 9:
            high, low, kind, flags, sid = FRAME_HEAD.unpack_from(buffer, start)
            length = high << 16 | low
            stop = start + 9 + length
            if stop > end:
                break
            sid &= MAX_STREAM_ID
            at = start + 9
            start = stop
            if kind == DATA:
                self._consumed(length)
                answer = self._answer_for(sid)
                if answer is not None:
                    if flags & PADDED:
                        stop -= buffer[at]
                        at += 1
                    answer.parts.append(bytes(buffer[at:stop]))
                    if flags & END_STREAM:
                        answer.ended = True
            elif kind in (HEADERS, CONTINUATION):
                answer = self._answer_for(sid)
                if answer is None:
                    continue
                if kind == HEADERS and flags & _PLAIN_BLOCK == END_HEADERS and not self.block:
                    # a whole header block in one plain frame (every answer's, from Triton)
                    fields = self._decode(bytes(buffer[at:stop]))
                    if flags & END_STREAM:
                        answer.trailers = fields
                        answer.ended = True
                    elif answer.headers is None:
                        answer.headers = fields
                    else:
                        answer.trailers = fields
                else:
                    self._header_fragment(answer, kind, flags, bytes(buffer[at:stop]))
            else:
                self._control(kind, flags, sid, bytes(buffer[at:stop]))
        self.start = start

    def _consumed(self, length: int) -> None:
        """Give the connection window back once half of it is used (every gigabyte)."""
        self.recv_window -= length
        if self.recv_window < MAX_WINDOW // 2:
            self._write(
                frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - self.recv_window).to_bytes(4, "big"))
            )
            self.recv_window = MAX_WINDOW

    def _header_fragment(self, answer: _Answer, kind: int, flags: int, payload: bytes) -> None:
        if kind == HEADERS:
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            self.block = [payload]
            self.block_ends_stream = bool(flags & END_STREAM)
        else:
            self.block.append(payload)
        if not flags & END_HEADERS:
            return
        block = self.block[0] if len(self.block) == 1 else b"".join(self.block)
        self.block = []
        fields = self._decode(block)
        if answer.headers is None and not self.block_ends_stream:
            answer.headers = fields
        else:
            answer.trailers = fields
        if self.block_ends_stream:
            answer.ended = True

    def _decode(self, block: bytes) -> dict[str, str]:
        """A header block's fields. One seen before, without grpc-message, that neither used
        nor changed the decoder's dynamic table is taken from the client's memory: such a
        block means the same fields every time. (We ask for no dynamic table; gRPC's server
        honours that, though its first trailers-only answer may skip the size update that
        says so, which is why the decoder still allows the default table.)"""
        table = self.decoder.header_table
        known = self.server.known_blocks
        if not table.dynamic_entries:
            fields = known.get(block)
            if fields is not None:
                return fields
        fields = dict(cast("list[tuple[str, str]]", self.decoder.decode(block)))  # raw=False
        if "grpc-message" not in fields and not table.dynamic_entries and len(known) < KNOWN_BLOCKS:
            known[block] = fields
        return fields

    def _control(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if kind == SETTINGS:
            if flags & ACK:
                return
            for at in range(0, len(payload) - 5, 6):
                key = int.from_bytes(payload[at : at + 2], "big")
                value = int.from_bytes(payload[at + 2 : at + 6], "big")
                if key == SETTINGS_INITIAL_WINDOW_SIZE:
                    change = value - self.stream_window_initial
                    for out in self.outgoing:
                        out.window += change
                    self.stream_window_initial = value
                elif key == SETTINGS_MAX_FRAME_SIZE:
                    self.max_frame = value
            self._write(frame(SETTINGS, ACK, 0))
            if self.outgoing:
                self._flush()
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & MAX_WINDOW
            if sid == 0:
                self.send_window += increment
            else:
                for out in self.outgoing:
                    if out.stream == sid:
                        out.window += increment
            if self.outgoing:
                self._flush()
        elif kind == PING:
            if not flags & ACK:
                self._write(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            answer = self._answer_for(sid)
            if answer is not None and not answer.ended:
                code = int.from_bytes(payload[:4], "big")
                if code == REFUSED_STREAM:
                    error: Exception = _Unprocessed(
                        "the server refused the stream (REFUSED_STREAM)"
                    )
                else:
                    error = ConnectionResetError(
                        f"the server reset the stream (HTTP/2 error {code})"
                    )
                self._failed_stream(answer, error)
        elif kind == GOAWAY:
            self.going_away = True
            last = int.from_bytes(payload[:4], "big") & MAX_STREAM_ID
            if self.stream > last and not self.answer.ended:
                code = int.from_bytes(payload[4:8], "big")
                raise _Unprocessed(
                    f"the server is closing the connection (GOAWAY, HTTP/2 "
                    f"error {code}) and did not take the request"
                )
        elif kind == PUSH_PROMISE:
            raise ConnectionError("the server pushed a stream although push is disabled")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def grpc_status_error(code: str, message: str, hostport: str) -> InferenceServerException:
    """A non-zero grpc-status as tritonclient's channel path reports it (grpc_call.rpc_error):
    the decoded grpc-message, and the status as grpc.StatusCode prints."""
    try:
        status = STATUS_CODES.get(int(code), grpc.StatusCode.UNKNOWN)
    except ValueError:
        status = grpc.StatusCode.UNKNOWN
    details = unquote(message)
    return InferenceServerException(
        msg=details,
        status=str(status),
        debug_details=f"grpc-status {code} from {hostport}: {details}",
    )


class SharedHttp2Connection(Http2Connection):
    """One HTTP/2 connection that carries a stream of each of several users at once, as a
    gRPC client's shared channel does (perf_analyzer's contexts share one): the requests of
    a round reach the server on one connection. Answers are kept by stream id until their
    user takes them; a reset stream fails only its own request."""

    def __init__(self, server: _Server) -> None:
        super().__init__(server)
        self.answers: dict[int, _Answer] = {}

    def open_stream(self, frames: GrpcFrames) -> int:
        """Send a request on a new stream (what the windows let out now); its id."""
        self.begin(frames)
        return self.stream

    def _opened(self, stream: int, answer: _Answer) -> None:
        self.answers[stream] = answer

    def receive(self, ready: bool = False) -> None:
        """Read what arrived, for every stream (each user then asks ended() of its own)."""
        self._read(ready)

    def advance(self, ready: bool = False) -> bool:
        """One receive; whether the last opened stream's answer is whole."""
        self.receive(ready)
        return self.ended(self.stream)

    def ended(self, stream: int) -> bool:
        answer = self.answers.get(stream)
        return answer is None or answer.ended

    def take(self, stream: int) -> bytes:
        """The stream's answer (its message, or its failure raised), forgotten here."""
        answer = self.answers.pop(stream)
        if answer.error is not None:
            raise answer.error
        return self._result(answer)

    def cancel(self, stream: int) -> None:
        """Give up a stream (its request timed out): RST_STREAM CANCEL, its answer dropped."""
        if self.answers.pop(stream, None) is not None:
            with contextlib.suppress(OSError):
                self._write(frame(RST_STREAM, 0, stream, CANCEL.to_bytes(4, "big")))

    def _answer_for(self, sid: int) -> _Answer | None:
        return self.answers.get(sid)

    def _failed_stream(self, answer: _Answer, error: Exception) -> None:
        answer.error = error
        answer.ended = True


class SharedConnections:
    """One process's shared HTTP/2 connection to one server, and the lanes on each."""

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.current: SharedHttp2Connection | None = None
        self.lanes: dict[SharedHttp2Connection, int] = {}
        self.failures: dict[SharedHttp2Connection, Exception] = {}
        self._connecting = threading.Lock()  # gevent's, where Locust patched it in

    def attach(self) -> SharedHttp2Connection:
        with self._connecting:  # connecting waits in gevent: other lanes wait for it
            connection = self.current
            if connection is None:
                connection = self.current = SharedHttp2Connection(self.server)
        self.lanes[connection] = self.lanes.get(connection, 0) + 1
        return connection

    def detach(self, connection: SharedHttp2Connection) -> None:
        left = self.lanes.get(connection, 1) - 1
        if left > 0:
            self.lanes[connection] = left
            return
        self.lanes.pop(connection, None)
        self.failures.pop(connection, None)
        self.retire(connection)
        connection.close()

    def retire(self, connection: SharedHttp2Connection) -> None:
        """No new streams on `connection`; those on it finish."""
        if self.current is connection:
            self.current = None

    def fail(self, connection: SharedHttp2Connection, error: Exception) -> None:
        self.failures[connection] = error
        self.retire(connection)

    def failure_of(self, connection: SharedHttp2Connection) -> Exception | None:
        return self.failures.get(connection)


_SHARED: dict[tuple[int, str, bytes, bool], SharedConnections] = {}


def shared_connections(server: _Server) -> SharedConnections:
    """This process's shared connections to `server` (the same address, headers and TLS;
    a forked process makes its own)."""
    key = (os.getpid(), server.hostport, server.headers_block, server.security.tls)
    found = _SHARED.get(key)
    if found is None:
        found = _SHARED[key] = SharedConnections(server)
    return found


class GrpcConnections(IdleConnections[Http2Connection]):
    """HTTP/2 connections to one server, one per request in flight."""

    def __init__(self, hostport: str, timeout_s: float | None, security: Security = PLAIN) -> None:
        super().__init__()
        self.server = _Server.at(hostport, timeout_s, security)

    def exchange(self, frames: GrpcFrames) -> bytes:
        """One request, its answer's message. A request the server did not take (a kept-alive
        connection it closed meanwhile, a GOAWAY before our stream) is sent once more on a
        new connection."""
        return self.exchange_on(
            functools.partial(Http2Connection, self.server),
            lambda c: (c.exchange(frames), c.usable),
            _not_taken,
            _usable,
        )


def _not_taken(connection: Http2Connection, dropped: Exception) -> bool:
    return isinstance(dropped, _Unprocessed) or (
        connection.reused and not connection.answer.received
    )


def _usable(connection: Http2Connection) -> bool:
    return connection.usable


def h2_available() -> bool:
    """Whether the direct HTTP/2 path can run: it needs `hpack` (the `load` extra)."""
    try:
        import hpack  # noqa: F401
    except ImportError:
        return False
    return True
