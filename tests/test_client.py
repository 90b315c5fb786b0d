"""TritonClient's edges on a real server: metadata alike on both protocols, BYTES tensors,
versions that do not exist, timeouts and servers that cannot be reached, each with a message
that names model, protocol and server."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from pytest_triton import InferenceError, TritonClient
from pytest_triton.launchers import LocalLauncher, ServerArgs
from pytest_triton.launchers.base import RunningServer, free_ports
from tests.raw_models import write_bytes_model, write_python_model, write_slow_model

pytestmark = pytest.mark.triton
PROTOCOLS = ["http", "grpc"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("repo")
    write_python_model(root, "add_one")
    write_bytes_model(root)
    write_slow_model(root, seconds=3.0)
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as srv:
        yield srv


def client(server: RunningServer, protocol: str, **kwargs: float) -> TritonClient:
    return TritonClient(server.endpoints.url(protocol), protocol,  # type: ignore[arg-type]
                        server=server, **kwargs)


def test_metadata_reads_the_same_on_both_protocols(server: RunningServer) -> None:
    http, grpc = (client(server, p).model_metadata("add_one") for p in PROTOCOLS)
    assert http == grpc
    assert http["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}]
    assert http["versions"] == ["1"]
    client(server, "http").infer("add_one", {"X": np.zeros((2, 4), np.float32)})
    stats = [client(server, p).statistics("add_one")["model_stats"][0] for p in PROTOCOLS]
    assert stats[0]["version"] == stats[1]["version"] == "1"
    assert stats[0]["inference_count"] == stats[1]["inference_count"] >= 2
    servers = [client(server, p).server_metadata() for p in PROTOCOLS]
    assert servers[0]["version"] == servers[1]["version"] == "2.51.0"  # the bundled server
    assert "statistics" in servers[0]["extensions"] and set(servers[0]["extensions"]) == set(
        servers[1]["extensions"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ["object", "bytes_"])
def test_bytes_tensors_round_trip(server: RunningServer, protocol: str, kind: str) -> None:
    words = [[b"triton", b"", b"caf\xc3\xa9"], [b"a b", b"\x00\x01", b"z"]]
    text = np.array(words, dtype=object if kind == "object" else np.bytes_)
    out = client(server, protocol).infer("echo_bytes", {"TEXT": text})["UPPER"]
    assert out.dtype == object and out.shape == (2, 3)
    expected = [[w.upper() for w in row] for row in words]
    if kind == "bytes_":  # numpy's fixed-width bytes drop trailing NULs, as tritonclient warns
        expected[1][1] = b"\x00\x01"
    assert out.tolist() == expected


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("version", ["abc", "7", "-1"])
def test_unknown_versions_name_model_and_version(server: RunningServer, protocol: str,
                                                 version: str) -> None:
    with pytest.raises(InferenceError) as info:
        client(server, protocol).infer("add_one", {"X": np.zeros((1, 4), np.float32)},
                                       version=version)
    message = str(info.value)
    assert f"{protocol} request to model 'add_one' failed" in message
    assert version in message, message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_timeout_names_model_protocol_and_server(server: RunningServer, protocol: str) -> None:
    slow = client(server, protocol, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(InferenceError) as info:
        slow.infer("slow", {"X": np.zeros((1, 4), np.float32)})
    assert time.monotonic() - started < 3.0  # the model takes 3 s: the timeout cut it short
    message = str(info.value)
    assert f"{protocol} request to model 'slow' failed" in message
    assert server.endpoints.url(protocol) in message and "within 0.5s" in message, message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_nothing_listening_is_named(protocol: str) -> None:
    (port,) = free_ports(1)
    nobody = TritonClient(f"127.0.0.1:{port}", protocol, timeout_s=5)  # type: ignore[arg-type]
    with pytest.raises(InferenceError) as info:
        nobody.infer("any", {"X": np.zeros((1, 4), np.float32)}, outputs=["Y"])
    assert f"server at 127.0.0.1:{port} unreachable" in str(info.value)
    assert f"{protocol} request to model 'any'" in str(info.value)


def test_prepared_requests_are_sent_again_and_again(server: RunningServer) -> None:
    for protocol in PROTOCOLS:
        c = client(server, protocol)
        request = c.prepare("add_one", {"X": np.arange(8, dtype=np.float32).reshape(2, 4)})
        for _ in range(3):
            out = c.send(request)
            np.testing.assert_array_equal(out["Y"], np.arange(1, 9).reshape(2, 4))
