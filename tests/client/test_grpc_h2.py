"""The direct HTTP/2 gRPC path (wire/grpc_h2.py: HTTP/2 spoken directly) against gRPC's own channel
(wire/grpc_call.py) on a real server: the same answer bytes for every model and size (answers
and requests past every flow-control window included), the same rejections, and a killed
server or a timeout read as the channel's are."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from pytest_triton import InferenceError, TritonClient
from pytest_triton.base.errors import ServerError
from pytest_triton.client.wire import grpc_h2
from pytest_triton.client.wire.grpc_call import GrpcInfer
from pytest_triton.client.wire.grpc_h2 import (
    DEFAULT_FRAME,
    DEFAULT_WINDOW,
    GrpcConnections,
    GrpcFrames,
)
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import RunningServer
from pytest_triton.server.local import LocalServer
from tests.helpers.raw_models import (
    write_bytes_model,
    write_python_model,
    write_slow_model,
    write_two_input_model,
    write_variable_length_model,
)

pytestmark = pytest.mark.triton
MIB = 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("repo")
    write_python_model(root, "add_one")  # X FP32 [4] -> Y = X + 1, max batch 8
    write_two_input_model(root)  # sum_two: A FP32 [4], B INT32 [2]
    write_variable_length_model(root)  # identity_var: W = V, FP32 [-1]
    write_bytes_model(root)  # echo_bytes: TEXT BYTES [-1]
    write_slow_model(root, seconds=3.0)
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[TritonClient]:
    with TritonClient(server.endpoints.grpc, "grpc", server=server) as c:
        yield c


@pytest.fixture(scope="module")
def channel(server: RunningServer) -> Iterator[GrpcInfer]:
    infer = GrpcInfer(server.endpoints.grpc)
    yield infer
    infer.close()


@pytest.fixture
def lean(server: RunningServer) -> Iterator[GrpcConnections]:
    connections = GrpcConnections(server.endpoints.grpc, 30.0)
    yield connections
    connections.close()


def floats(count: int, rows: int = 1) -> dict[str, np.ndarray]:
    return {"V": np.arange(count * rows, dtype=np.float32).reshape(rows, count)}


CASES = {
    "add_one-b1": ("add_one", lambda: {"X": np.ones((1, 4), np.float32)}),
    "add_one-b8": ("add_one", lambda: {"X": np.arange(32, dtype=np.float32).reshape(8, 4)}),
    "sum_two-b3": (
        "sum_two",
        lambda: {"A": np.ones((3, 4), np.float32), "B": np.arange(6, dtype=np.int32).reshape(3, 2)},
    ),
    "echo_bytes": (
        "echo_bytes",
        lambda: {"TEXT": np.array([[b"a", b"\x00bc", b""]], dtype=object)},
    ),
    # one DATA frame any peer accepts, just not: the request goes out in several frames
    "identity_var-17KiB": ("identity_var", lambda: floats(DEFAULT_FRAME // 4 + 100)),
    # past the 64 KiB windows both ways (the server's connection window before its update)
    "identity_var-80KiB": ("identity_var", lambda: floats(20_000)),
    # past 1 MiB both ways, in 4 rows
    "identity_var-4x1.2MiB": ("identity_var", lambda: floats(300_000, rows=4)),
}


@pytest.mark.parametrize("case", CASES)
def test_answers_are_the_channels_byte_for_byte(
    client: TritonClient, channel: GrpcInfer, lean: GrpcConnections, case: str
) -> None:
    model, make = CASES[case]
    with client.prepare(model, make()) as request:
        assert request.frames is not None
        assert request.frames.message is request.wire  # the frames hold no copy
        by_channel = channel.exchange(request.wire, 30.0)
        for _ in range(2):  # a new connection, then the same one again
            assert lean.exchange(request.frames) == by_channel
        assert client.send_status(request) == len(by_channel)
        outputs = client.send(request)
    for name, array in outputs.items():
        assert array.size, name
    if case.startswith("identity_var"):
        np.testing.assert_array_equal(outputs["W"], make()["V"])
        assert len(by_channel) > (MIB if "MiB" in case else 0)


def test_a_request_past_the_windows_waits_for_window_updates(
    client: TritonClient, lean: GrpcConnections
) -> None:
    """5 MiB out on one new connection: more than the 64 KiB it may send before the server's
    WINDOW_UPDATE, and more than the server's own stream window."""
    inputs = floats(5 * MIB // 4)
    with client.prepare("identity_var", inputs) as request:
        assert request.frames is not None and request.frames.single_head is None
        assert request.frames.size > 64 * DEFAULT_WINDOW
        answer = lean.exchange(request.frames)
    assert len(answer) > 5 * MIB
    assert len(lean) and lean.parked()[0].usable  # the connection is still good


def test_a_shared_connections_sends_never_read(server: RunningServer, client: TritonClient) -> None:
    """Two streams of 80 KiB opened at once on one shared connection: each send returns with
    what the windows let out, having read nothing, the rest waiting in the connection; reading
    then sends it as the WINDOW_UPDATEs come, and both answers arrive whole. (On a shared
    connection the load driver is the one reader: sends that read took the window updates and
    answers other streams waited for, and a DLRM run stalled; two users' first sends, each
    in its own greenlet, failed with gevent's ConcurrentObjectUseError.)"""
    connection = grpc_h2.SharedHttp2Connection(grpc_h2._Server.at(server.endpoints.grpc, 30.0))
    try:
        with client.prepare("identity_var", floats(20_000)) as request:
            assert request.frames is not None and request.frames.size > DEFAULT_WINDOW
            streams = [connection.open_stream(request.frames) for _ in range(2)]
            assert connection.end == 0  # nothing read
            assert connection.outgoing  # what the windows did not let out
            deadline = time.monotonic() + 30
            while not all(connection.ended(s) for s in streams):
                assert time.monotonic() < deadline, "the answers did not come"
                connection.receive()
            first, second = (connection.take(s) for s in streams)
        assert first == second and len(first) > 80_000
        assert not connection.outgoing
    finally:
        connection.close()


REJECTED = {
    "unknown model": ("no_such_model", {"X": np.ones((1, 4), np.float32)}),
    "wrong shape": ("add_one", {"X": np.ones((1, 3), np.float32)}),
    "wrong dtype": ("add_one", {"X": np.ones((1, 4), np.int32)}),
    "batch above max": ("add_one", {"X": np.ones((9, 4), np.float32)}),
    "unknown version": ("add_one", {"X": np.ones((1, 4), np.float32)}, "7"),
    # 80 kB, past the 64 KiB windows: the rest of its DATA waits for the server's update
    "unknown model, 80 kB": ("no_such_model", {"X": np.ones((5000, 4), np.float32)}),
}


@pytest.mark.parametrize("case", REJECTED)
def test_rejections_read_as_the_channels(
    client: TritonClient, channel: GrpcInfer, lean: GrpcConnections, case: str
) -> None:
    model, inputs, *version = REJECTED[case]
    request = client.prepare(model, inputs, ["Y"], *version)
    assert request.frames is not None
    with pytest.raises(InferenceServerException) as by_channel:
        channel.exchange(request.wire, 30.0)
    with pytest.raises(InferenceServerException) as by_lean:
        lean.exchange(request.frames)
    assert (by_lean.value.message(), by_lean.value.status()) == (
        by_channel.value.message(),
        by_channel.value.status(),
    )
    assert by_lean.value.status().startswith("StatusCode.")
    # through the client, the error a user reads; the same connection serves on after it
    with pytest.raises(InferenceError) as info:
        client.send_status(request)
    assert by_channel.value.message().split("] ", 1)[-1][:60] in str(info.value)
    good = client.prepare("add_one", {"X": np.ones((1, 4), np.float32)})
    assert good.frames is not None
    assert lean.exchange(good.frames) == channel.exchange(good.wire, 30.0)


def test_a_timeout_is_a_timeout(server: RunningServer) -> None:
    """The grpc-timeout header and the socket timeout: the 3-s model is cut short."""
    with TritonClient(server.endpoints.grpc, "grpc", server=server) as c:
        request = c.prepare("slow", {"X": np.zeros((1, 4), np.float32)})
    assert request.frames is not None
    connections = GrpcConnections(server.endpoints.grpc, 0.5)
    started = time.monotonic()
    with pytest.raises((TimeoutError, InferenceServerException)) as info:
        connections.exchange(request.frames)
    assert time.monotonic() - started < 2.5
    if isinstance(info.value, InferenceServerException):
        assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    connections.close()


def test_the_lean_path_is_what_grpc_clients_load_through(server: RunningServer) -> None:
    """send_status() (load) takes the direct HTTP/2 path; send() and infer_many() (checks)
    leave it unused: they go through tritonclient (request_path.py)."""
    for memory in ("none", "system"):
        with TritonClient(server.endpoints.grpc, "grpc", server=server, shared_memory=memory) as c:  # type: ignore[arg-type]
            assert c.path.load == "grpc-h2"
            request = c.prepare("add_one", {"X": np.ones((2, 4), np.float32)})
            out = c.send(request)
            np.testing.assert_array_equal(out["Y"], np.full((2, 4), 2, np.float32))
            assert c.load.h2 is None, memory
            assert c.send_status(request) > 0
            assert c.load.h2 is not None and len(c.load.h2), memory
            request.release()
            rows = [{"X": np.full((1, 4), i, np.float32)} for i in range(6)]
            answers = c.infer_many("add_one", rows)
            assert [float(a["Y"][0, 0]) for a in answers] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


# -- a server killed mid-request -----------------------------------------------------------
@pytest.fixture
def doomed(tmp_path: Path) -> Iterator[LocalServer]:
    write_slow_model(tmp_path / "repo", seconds=60.0)
    write_python_model(tmp_path / "repo", "add_one")
    with LocalLauncher().start(ServerArgs(tmp_path / "repo", model_control_mode="none")) as s:
        assert isinstance(s, LocalServer)
        yield s


def test_a_killed_server_drops_the_request_at_once(doomed: LocalServer) -> None:
    url = doomed.endpoints.grpc
    knowing = TritonClient(url, "grpc", server=doomed, timeout_s=120)
    blind = TritonClient(url, "grpc", timeout_s=120)  # knows the address only
    blind.control.endpoint = dataclasses.replace(blind.control.endpoint, server=None)
    x = {"X": np.zeros((1, 4), np.float32)}
    for c in (knowing, blind):  # a connection each in the pool, reused by the next request
        c.send_status(c.prepare("add_one", x))
    outcomes: dict[str, tuple[BaseException | None, float]] = {}

    def send(name: str, c: TritonClient) -> None:
        started = time.monotonic()
        try:
            c.send_status(c.prepare("slow", x))
        except BaseException as exc:
            outcomes[name] = (exc, time.monotonic() - started)
        else:
            outcomes[name] = (None, time.monotonic() - started)

    threads = [
        threading.Thread(target=send, args=item)
        for item in (("knowing", knowing), ("blind", blind))
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)
    os.kill(doomed.process.pid, signal.SIGKILL)
    for t in threads:
        t.join(30)
    died, took = outcomes["knowing"]
    assert isinstance(died, ServerError), repr(died)
    assert "grpc request to model 'slow'" in str(died) and took < 10
    dropped, took = outcomes["blind"]
    assert isinstance(dropped, InferenceError), repr(dropped)
    assert f"the server at {url} dropped the connection before answering" in str(
        dropped
    ) or f"server at {url} unreachable" in str(dropped), str(dropped)
    assert took < 10
    for c in (knowing, blind):
        c.close()


# -- frames, without a server --------------------------------------------------------------
def test_frames_are_built_once_with_the_grpc_prefix() -> None:
    small = GrpcFrames.of(b"abc")
    assert small.prefix == b"\x00\x00\x00\x00\x03" and small.size == 8
    assert small.single_head == b"\x00\x00\x08\x00\x01"  # length 8, DATA, END_STREAM
    big = GrpcFrames.of(b"x" * DEFAULT_FRAME)
    assert big.single_head is None and big.size == DEFAULT_FRAME + 5


def test_the_preface_asks_for_no_table_and_large_windows() -> None:
    preface = grpc_h2.client_preface()
    assert preface.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    settings = preface[24:]
    length = int.from_bytes(settings[:3], "big")
    assert settings[3:5] == bytes((grpc_h2.SETTINGS, 0))
    pairs = {
        int.from_bytes(settings[9 + i : 11 + i], "big"): int.from_bytes(
            settings[11 + i : 15 + i], "big"
        )
        for i in range(0, length, 6)
    }
    assert pairs == {1: 0, 2: 0, 4: 2**31 - 1, 5: 2**20}
    update = settings[9 + length :]
    assert (
        update[3] == grpc_h2.WINDOW_UPDATE
        and int.from_bytes(update[9:], "big") == 2**31 - 1 - 65535
    )


@pytest.mark.parametrize(
    ("seconds", "header"), [(60.0, "60000m"), (0.5, "500m"), (0.0001, "1m"), (10**6, "1000000S")]
)
def test_grpc_timeout_fits_eight_digits(seconds: float, header: str) -> None:
    assert grpc_h2.grpc_timeout(seconds) == header


def test_a_non_zero_status_reads_as_tritonclients() -> None:
    error = grpc_h2.grpc_status_error("3", "unexpected shape %25 for input %27X%27", "h:1")
    assert (error.message(), error.status()) == (
        "unexpected shape % for input 'X'",
        "StatusCode.INVALID_ARGUMENT",
    )
    assert grpc_h2.grpc_status_error("99", "", "h:1").status() == "StatusCode.UNKNOWN"
