"""The two request paths of request_path.py on a real server: the hand-written load wire
answers byte for byte what tritonclient answers (so the fast path cannot drift), and a
correctness check goes through tritonclient's own InferenceServerClient, never the wire."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pytest_triton import InferenceError, TritonClient, assert_parity
from pytest_triton.base.dtypes import Array
from pytest_triton.client.inference import IN_FLIGHT
from pytest_triton.client.wire.grpc_call import GrpcInfer
from pytest_triton.client.wire.grpc_h2 import GrpcConnections
from pytest_triton.client.wire.http_conn import HttpConnections
from pytest_triton.client.wire.request import read_answer
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import RunningServer
from tests.helpers.raw_models import write_mixed_model, write_python_model

pytestmark = pytest.mark.triton
CASES = [(p, m) for p in ("http", "grpc") for m in ("none", "system")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("repo")
    write_mixed_model(root)
    write_python_model(root, "add_one")
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as srv:
        yield srv


def client(server: RunningServer, protocol: str, memory: str = "none") -> TritonClient:
    return TritonClient(
        server.endpoints.url(protocol),
        protocol,  # type: ignore[arg-type]
        server=server,
        shared_memory=memory,  # type: ignore[arg-type]
    )


def mixed(batch: int) -> dict[str, Array]:
    rng = np.random.default_rng(batch)
    words = [b"a", b"triton", "\u00e9t\u00e9".encode(), b"", b"x" * 300]
    return {
        "H": rng.standard_normal((batch, 3)).astype(np.float16),
        "I": rng.integers(-(2**40), 2**40, (batch, 2), dtype=np.int64),
        "T": np.array([[words[(r + c) % 5] for c in range(2)] for r in range(batch)], object),
    }


def as_bytes(array: Array) -> tuple[str, tuple[int, ...], bytes]:
    """An output's dtype, shape and every byte of its data (BYTES elements joined with
    their lengths, so ["ab", ""] and ["a", "b"] differ)."""
    if array.dtype == object:
        data = b"".join(len(bytes(x)).to_bytes(4, "little") + bytes(x) for x in array.ravel())
    else:
        data = np.ascontiguousarray(array).tobytes()
    return str(array.dtype), array.shape, data


@pytest.mark.parametrize(("protocol", "memory"), CASES)
@pytest.mark.parametrize("batch", [1, 4])
def test_the_load_wire_answers_what_tritonclient_answers(
    server: RunningServer, protocol: str, memory: str, batch: int
) -> None:
    with client(server, protocol, memory) as c:
        request = c.prepare("mixed", mixed(batch), ["H2", "I2", "U", "S"])
        with request:
            fast = read_answer(request, c.send_answer(request))
            fast = {name: np.array(a, copy=True) for name, a in fast.items()}
            standard = c.send(request)
    assert list(fast) == list(standard) == ["H2", "I2", "U", "S"]
    for name in fast:
        assert as_bytes(fast[name]) == as_bytes(standard[name]), name
    assert standard["H2"].dtype == np.float16 and standard["H2"].shape == (batch, 3)
    assert standard["U"][0, 1] == mixed(batch)["T"][0, 1].upper()


Counts = dict[str, int]


def counting(monkeypatch: pytest.MonkeyPatch, counts: Counts, owner: type, name: str) -> None:
    """Count calls of owner.name; each still runs the real method."""
    real: Callable[..., Any] = getattr(owner, name)
    key = f"{owner.__module__}.{owner.__qualname__}.{name}"
    counts[key] = 0

    def spy(*args: Any, **kwargs: Any) -> Any:
        counts[key] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    found: Counts = {}
    for module in (httpclient, grpcclient):
        counting(monkeypatch, found, module.InferenceServerClient, "infer")
    counting(monkeypatch, found, grpcclient.InferenceServerClient, "async_infer")
    for wire in (HttpConnections, GrpcConnections, GrpcInfer):
        counting(monkeypatch, found, wire, "exchange")
    return found


def standard_calls(counts: Counts) -> int:
    """tritonclient's infer() and gRPC's async_infer() (infer_many's path over gRPC)."""
    return sum(n for key, n in counts.items() if ".InferenceServerClient." in key)


def wire_calls(counts: Counts) -> int:
    return sum(n for key, n in counts.items() if key.endswith(".exchange"))


@pytest.mark.parametrize(("protocol", "memory"), CASES)
def test_a_parity_check_goes_through_tritonclient(
    server: RunningServer, counts: Counts, protocol: str, memory: str
) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with client(server, protocol, memory) as c:
        assert_parity({"Y": x + 1}, c.infer("add_one", {"X": x}), protocol=protocol)
        rows = [{"X": x[i : i + 1]} for i in range(2)]
        for row, answer in zip(rows, c.infer_many("add_one", rows), strict=True):
            assert_parity({"Y": row["X"] + 1}, answer, protocol=protocol)
        assert (standard_calls(counts), wire_calls(counts)) == (3, 0)
        many = counts["tritonclient.grpc._client.InferenceServerClient.async_infer"]
        assert many == (2 if protocol == "grpc" else 0), "gRPC's infer_many: one thread, async"
        c.send_status(c.prepare("add_one", {"X": x}, ["Y"]))  # load: the hand-written wire
    assert (standard_calls(counts), wire_calls(counts)) == (3, 1)


@pytest.mark.parametrize(("protocol", "memory"), CASES)
def test_infer_many_answers_in_order_and_fails_as_send(
    server: RunningServer, protocol: str, memory: str
) -> None:
    """More requests than infer_many keeps in flight, answered in request order; one bad
    request among them fails with send()'s own error, and leaves no region behind."""
    rows = [{"X": np.full((1, 4), i, np.float32)} for i in range(IN_FLIGHT + 6)]
    with client(server, protocol, memory) as c:
        answers = c.infer_many("add_one", rows, ["Y"])
        assert [int(a["Y"][0, 0]) for a in answers] == [i + 1 for i in range(len(rows))]
        bad = {"X": np.zeros((1, 5), np.float32)}
        with pytest.raises(InferenceError) as alone:
            c.infer("add_one", bad, ["Y"])
        with pytest.raises(InferenceError) as among:
            c.infer_many("add_one", [*rows[:3], bad, *rows[3:]], ["Y"])
        assert str(among.value) == str(alone.value)
        assert c.infer_many("add_one", rows[:2], ["Y"])[1]["Y"][0, 0] == 2, "still usable"
        assert len(c.shared_memory_regions) == (1 if memory == "system" else 0)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_rejection_over_tritonclient_keeps_its_form(server: RunningServer, protocol: str) -> None:
    with client(server, protocol) as c, pytest.raises(InferenceError) as info:
        c.infer("add_one", {"X": np.zeros((1, 5), np.float32)}, ["Y"])
    message = str(info.value)
    assert "'add_one'" in message and protocol in message and "[1,5]" in message.replace(" ", "")


def test_the_path_shows_in_repr_and_log(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="pytest_triton.client.triton_client"):
        c = client(server, "http", "system")
    with c:
        assert repr(c) == (
            f"TritonClient(http://{c.url}, shared_memory=system, "
            "checks over tritonclient.http, load over http1-pool)"
        )
        assert repr(c) in caplog.text
