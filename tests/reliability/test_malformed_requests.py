"""Malformed requests, each over HTTP and gRPC, against one real server: every one gets an error
that names the problem, and a good request is answered right after it.

Requests our TritonClient can build go through it (its message is what a user reads; where it
refuses a request before sending, that message is checked); the rest go out as raw bytes
(raw_requests) so that the server's own handling is checked.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import psutil
import pytest
from tritonclient.utils import InferenceServerException

from pytest_triton import InferenceError, TritonClient
from pytest_triton.client.failures import rejected
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.local import LocalServer
from tests.helpers import raw_requests as raw
from tests.helpers.raw_models import (
    write_bytes_model,
    write_python_model,
    write_two_input_model,
    write_variable_length_model,
)
from tests.helpers.raw_requests import Request, Tensor

pytestmark = [pytest.mark.reliability, pytest.mark.triton]
PROTOCOLS = ["http", "grpc"]
ROW = np.arange(4, dtype=np.float32).reshape(1, 4)
GIB = 2**30


@dataclass
class Target:
    server: LocalServer
    clients: dict[str, TritonClient]

    def address(self, protocol: str) -> str:
        return self.server.endpoints.url(protocol)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    root = tmp_path_factory.mktemp("repo")
    write_python_model(root, "add_one")  # X FP32 [4] -> Y = X + 1, max batch 8
    write_python_model(root, "unloaded")
    write_two_input_model(root)  # sum_two: A FP32 [4], B INT32 [2]
    write_variable_length_model(root)  # identity_var: V FP32 [-1]
    write_bytes_model(root)  # echo_bytes: TEXT BYTES [-1]
    loaded = ("add_one", "sum_two", "identity_var", "echo_bytes")
    with LocalLauncher().start(ServerArgs(root, load_models=loaded)) as server:
        assert isinstance(server, LocalServer)
        clients = {
            p: TritonClient(server.endpoints.url(p), p, server=server)  # type: ignore[arg-type]
            for p in PROTOCOLS
        }
        yield Target(server, clients)
        for client in clients.values():
            client.close()


# -- how each kind of request is sent ----------------------------------------------------------
Send = Callable[[Target, str], str]


def by_client(
    model: str,
    inputs: dict[str, np.ndarray],
    *,
    version: str = "",
    outputs: list[str] | None = None,
) -> Send:
    """Through TritonClient: the InferenceError a user would read."""

    def send(target: Target, protocol: str) -> str:
        with pytest.raises(InferenceError) as info:
            target.clients[protocol].infer(model, inputs, outputs or ["Y"], version)
        return str(info.value)

    return send


def by_raw(request: Request) -> Send:
    """As bytes on the wire: the server's own error message."""

    def send(target: Target, protocol: str) -> str:
        return raw.send(protocol, target.address(protocol), request).error()

    return send


def per_protocol(http: Send, grpc: Send) -> Send:
    """Where a malformation only exists in one protocol's framing, its counterpart in the other."""
    return lambda target, protocol: (http if protocol == "http" else grpc)(target, protocol)


def explained(target: Target, protocol: str, request: Request) -> str:
    """The server's own refusal of a request (sent raw: numpy holds no negative dimension),
    as the client's failure mapping words it for the shapes that were sent."""
    said = raw.send(protocol, target.address(protocol), request).error()
    status = "StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400"
    shapes = {t.name: list(t.shape) for t in request.inputs}
    client = target.clients[protocol]
    return str(rejected(client, request.model, InferenceServerException(said, status), "", shapes))


def fp32(name: str, shape: list[int], values: int) -> Tensor:
    return Tensor(name, "FP32", shape, np.zeros(values, np.float32).tobytes())


def claim_2gb(target: Target, protocol: str) -> str:
    """A shape claiming 2 GiB with 16 bytes of data: refused by its size, nothing allocated."""
    rss = psutil.Process(target.server.process.pid).memory_info().rss
    message = by_raw(Request("identity_var", [fp32("V", [1, 2 * GIB // 4], 4)]))(target, protocol)
    grown = psutil.Process(target.server.process.pid).memory_info().rss - rss
    assert grown < GIB // 8, f"the server grew by {grown / 2**20:.0f} MiB for a 16-byte request"
    return message


@dataclass(frozen=True)
class Malformed:
    kind: str
    send: Send
    expect: str | dict[str, str]  # a regex the message must match (per protocol, if a dict)

    def pattern(self, protocol: str) -> str:
        return self.expect if isinstance(self.expect, str) else self.expect[protocol]


CASES = [
    Malformed(
        "empty_batch",
        by_client("add_one", {"X": np.zeros((0, 4), np.float32)}),
        r"byte size mismatch for input 'X'.*\(input 'X' has shape \[0, 4\], which holds "
        r"no data",
    ),
    Malformed(
        "negative_dim",
        by_raw(Request("add_one", [fp32("X", [-1, 4], 4)])),
        {
            "http": r"Unable to parse 'shape'",
            "grpc": r"byte size mismatch for input 'X' for model 'add_one'",
        },
    ),
    Malformed(
        "oversized_dim",
        by_client("add_one", {"X": np.zeros((1, 5), np.float32)}),
        r"unexpected shape for input 'X' for model 'add_one'\. Expected \[-1,4\], got "
        r"\[1,5\]",
    ),
    Malformed(
        "wrong_dtype",
        by_client("add_one", {"X": ROW.astype(np.int32)}),
        r"input 'X' data-type is 'INT32', but model 'add_one' expects 'FP32'",
    ),
    Malformed(
        "unknown_datatype",
        by_raw(Request("add_one", [Tensor("X", "FP128", [1, 4], ROW.tobytes())])),
        r"input 'X' data-type is '<invalid>', but model 'add_one' expects 'FP32'",
    ),
    Malformed(
        "dtype_triton_lacks",
        by_client("add_one", {"X": ROW.astype(np.complex64)}),
        r"not sent: input 'X' has numpy dtype complex64, which no Triton datatype "
        r"matches",
    ),
    Malformed(
        "wrong_input_name",
        by_client("add_one", {"Z": ROW}),
        r"unexpected inference input 'Z' for model 'add_one'",
    ),
    Malformed(
        "wrong_rank",
        by_client("add_one", {"X": ROW.reshape(1, 2, 2)}),
        r"unexpected shape for input 'X' .*Expected \[-1,4\], got \[1,2,2\]",
    ),
    Malformed(
        "missing_batch_dim",
        by_client("add_one", {"X": ROW.reshape(4)}),
        r"input 'X' has shape \[4\], without the batch dimension: model 'add_one' is batched"
        r".*send shape \[1, 4\] for one row.*Triton said: unexpected shape for input 'X' "
        r".*Expected \[-1,4\], got \[4\]",
    ),
    Malformed(
        "negative_dim_as_the_client_says_it",
        lambda t, p: explained(t, p, Request("add_one", [fp32("X", [-1, 4], 4)])),
        {
            "http": r"input 'X' was sent with shape \[-1, 4\]: a dimension below 0 is no "
            r"size.*Triton said: Unable to parse 'shape'",
            "grpc": r"input 'X' was sent with shape \[-1, 4\]: a dimension below 0 is no "
            r"size.*Triton said: input byte size mismatch",
        },
    ),
    Malformed(
        "bytes_for_fp32",
        by_client("add_one", {"X": np.array([[b"1"] * 4], object)}),
        r"input 'X' data-type is 'BYTES', but model 'add_one' expects 'FP32'",
    ),
    Malformed(
        "data_shorter_than_shape",
        by_raw(Request("add_one", [fp32("X", [2, 4], 4)])),
        r"byte size mismatch for input 'X' for model 'add_one'\. Expected 32, got 16",
    ),
    Malformed(
        "data_longer_than_shape",
        by_raw(Request("add_one", [fp32("X", [1, 4], 8)])),
        r"byte size mismatch for input 'X' for model 'add_one'\. Expected 16, got 32",
    ),
    Malformed(
        "input_without_data",
        by_raw(Request("add_one", [Tensor("X", "FP32", [1, 4])])),
        {
            "http": r"Input must set only one of the following fields: 'data', "
            r"'binary_data_size'",
            "grpc": r"unable to find data for input tensor 'X' for model 'add_one'",
        },
    ),
    Malformed(
        "missing_input",
        by_client("sum_two", {"A": ROW}, outputs=["S"]),
        r"expected 2 inputs but got 1 inputs for model 'sum_two'.*missing required "
        r"input\(s\) \['B'\]",
    ),
    Malformed(
        "extra_input",
        by_client("add_one", {"X": ROW, "W": ROW}),
        r"expected 1 inputs but got 2 inputs for model 'add_one'\. Got input\(s\) "
        r"\['W','X'\]",
    ),
    Malformed(
        "duplicate_input",
        by_raw(Request("add_one", [fp32("X", [1, 4], 4)] * 2)),
        r"input 'X' already exists in request",
    ),
    Malformed(
        "unknown_model",
        by_client("nope", {"X": ROW}),
        r"request to model 'nope' failed .*unknown model: 'nope' is not found",
    ),
    Malformed(
        "unloaded_model",
        by_client("unloaded", {"X": ROW}),
        r"unknown model: 'unloaded' is not found \(the server's repository has "
        r"'unloaded', but it is not loaded",
    ),
    Malformed(
        "unknown_version",
        by_client("add_one", {"X": ROW}, version="7"),
        r"'add_one' version 7 is not found \(the server has version\(s\) 1 of 'add_one'",
    ),
    Malformed(
        "malformed_version",
        by_client("add_one", {"X": ROW}, version="1.5"),
        r"not sent: version '1\.5' of model 'add_one' is not a version number",
    ),
    Malformed(
        "version_zero_at_the_server",
        by_raw(Request("add_one", [fp32("X", [1, 4], 4)], version="0")),
        r"unknown model: 'add_one' version 0 is not found",
    ),
    Malformed(
        "batch_above_max",
        by_client("add_one", {"X": np.zeros((9, 4), np.float32)}),
        r"batch-size must be <= 8 for 'add_one'",
    ),
    Malformed(
        "shape_claiming_2gb",
        claim_2gb,
        r"byte size mismatch for input 'V' for model 'identity_var'\. Expected "
        r"2147483648, got 16",
    ),
    Malformed(
        "path_like_model_name",
        by_client("../add_one", {"X": ROW}),
        r"not sent: '\.\./add_one' cannot be a Triton model name",
    ),
    Malformed(
        "path_like_model_name_at_the_server",
        per_protocol(
            by_raw(Request("..%2F..%2Fetc%2Fpasswd", [fp32("X", [1, 4], 4)])),
            by_raw(Request("../../etc/passwd", [fp32("X", [1, 4], 4)])),
        ),
        {
            "http": r"unknown model: '\.\.%2F\.\.%2Fetc%2Fpasswd' is not found",
            "grpc": r"unknown model: '\.\./\.\./etc/passwd' is not found",
        },
    ),
    Malformed("empty_model_name", by_client("", {"X": ROW}), r"not sent: the model name is empty"),
    Malformed(
        "unknown_output",
        by_client("add_one", {"X": ROW}, outputs=["NOPE"]),
        r"unexpected inference output 'NOPE' for model 'add_one'",
    ),
    Malformed(
        "unparseable_body",
        per_protocol(
            lambda t, p: raw.http_post(
                t.address(p), "/v2/models/add_one/infer", b'{"inputs": [{"name": "X",'
            ).error(),
            lambda t, p: raw.grpc_infer_bytes(
                t.address(p), b"\xff\xff\xff\x0f not protobuf"
            ).error(),
        ),
        {"http": r"failed to parse the request JSON buffer", "grpc": r"Unable to parse request"},
    ),
    Malformed(
        "framing_mismatch",
        per_protocol(
            lambda t, p: raw.http_post(
                t.address(p),
                "/v2/models/add_one/infer",
                b'{"inputs": []}',
                {"Inference-Header-Content-Length": "1000"},
            ).error(),
            by_raw(Request("sum_two", [fp32("A", [1, 4], 4), Tensor("B", "INT32", [1, 2])])),
        ),
        {
            "http": r"inference header size should be in range \(0, 14\), got: 1000",
            "grpc": r"unable to find data for input tensor 'B' for model 'sum_two'",
        },
    ),
    Malformed(
        "bytes_length_prefix_beyond_data",
        by_raw(
            Request(
                "echo_bytes", [Tensor("TEXT", "BYTES", [1, 1], struct.pack("<I", 1000) + b"abc")]
            )
        ),
        r"incomplete string data for inference input 'TEXT', expecting string of length "
        r"1000 but only 3 bytes available",
    ),
]


def answered_correctly(target: Target, protocol: str) -> None:
    out = target.clients[protocol].infer("add_one", {"X": ROW})
    np.testing.assert_array_equal(out["Y"], ROW + 1)
    assert target.server.exit_code() is None


def test_at_least_twenty_kinds() -> None:
    assert len({c.kind for c in CASES}) == len(CASES) >= 20


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
def test_malformed_request_is_named_and_the_server_serves_on(
    target: Target, case: Malformed, protocol: str
) -> None:
    message = case.send(target, protocol)
    assert re.search(case.pattern(protocol), message), (
        f"{case.kind} over {protocol}: the message does not name the problem:\n{message}"
    )
    answered_correctly(target, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_nan_and_inf_are_answered(target: Target, protocol: str) -> None:
    x = np.array([[np.nan, np.inf, -np.inf, -0.0]], np.float32)
    out = target.clients[protocol].infer("add_one", {"X": x})["Y"]
    np.testing.assert_array_equal(out, x + 1)  # NaN compares equal to NaN here
    answered_correctly(target, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_empty_variable_length_row_is_valid(target: Target, protocol: str) -> None:
    """Zero elements are not malformed where the dims allow them: answered, not refused."""
    out = target.clients[protocol].infer(
        "echo_bytes", {"TEXT": np.zeros((1, 0), object)}, ["UPPER"]
    )
    assert out["UPPER"].shape == (1, 0)


def test_the_server_never_crashed(target: Target) -> None:
    """Runs last in this module: after every malformed request above."""
    log = target.server.log_text()
    assert "Signal (" not in log and "Segmentation" not in log, log[-3000:]
    assert target.server.exit_code() is None
