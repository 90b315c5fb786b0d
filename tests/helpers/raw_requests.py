"""Inference requests as bytes on the wire: what tritonclient would refuse to build (a negative
dim, a shape that does not match its data, a duplicated input, a body that does not parse) still
reaches the server, so its own handling is tested too. HTTP through http.client, gRPC through
tritonclient's generated service stubs (service_pb2)."""

from __future__ import annotations

import contextlib
import http.client
import json
from dataclasses import dataclass, field

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

TIMEOUT_S = 10.0
GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    shape: list[int]
    data: bytes = b""
    json_data: list[object] | None = None  # HTTP only: the JSON "data" field instead of bytes


@dataclass(frozen=True)
class Reply:
    ok: bool
    status: str  # the HTTP status code, or the gRPC status name
    text: str  # the error message, or the body of an answer

    def error(self) -> str:
        """The server's error message; a request it answered fails the test."""
        assert not self.ok, f"the server answered a malformed request ({self.status}): {self.text}"
        return self.text


@dataclass
class Request:
    model: str
    inputs: list[Tensor]
    version: str = ""
    outputs: list[str] = field(default_factory=list)


def http_post(address: str, path: str, body: bytes, headers: dict[str, str] | None = None) -> Reply:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        connection.request("POST", path, body=body, headers=headers or {})
        response = connection.getresponse()
        text = response.read().decode(errors="replace")
    finally:
        connection.close()
    if response.status == 200:
        return Reply(True, "200", text)
    with contextlib.suppress(ValueError):
        text = json.loads(text).get("error", text)
    return Reply(False, str(response.status), text)


def http_infer(address: str, request: Request) -> Reply:
    """KServe v2 over HTTP: a JSON header, then the binary tensors it announces."""
    inputs = []
    blobs = []
    for t in request.inputs:
        entry: dict[str, object] = {"name": t.name, "datatype": t.datatype, "shape": t.shape}
        if t.json_data is not None:
            entry["data"] = t.json_data
        elif t.data:
            entry["parameters"] = {"binary_data_size": len(t.data)}
            blobs.append(t.data)
        inputs.append(entry)
    body: dict[str, object] = {"inputs": inputs}
    if request.outputs:
        body["outputs"] = [{"name": n} for n in request.outputs]
    header = json.dumps(body).encode()
    path = f"/v2/models/{request.model}"
    path += f"/versions/{request.version}/infer" if request.version else "/infer"
    headers = {"Inference-Header-Content-Length": str(len(header))} if blobs else {}
    return http_post(address, path, header + b"".join(blobs), headers)


def _grpc_reply(call: object, payload: object) -> Reply:
    try:
        answer = call(payload, timeout=TIMEOUT_S)  # type: ignore[operator]
    except grpc.RpcError as exc:
        return Reply(False, exc.code().name, exc.details() or "")
    return Reply(True, "OK", str(answer)[:500])


def grpc_infer(address: str, request: Request) -> Reply:
    message = service_pb2.ModelInferRequest(model_name=request.model, model_version=request.version)
    for t in request.inputs:
        tensor = message.inputs.add()
        tensor.name, tensor.datatype = t.name, t.datatype
        tensor.shape.extend(t.shape)
    for name in request.outputs:
        message.outputs.add().name = name
    message.raw_input_contents.extend(t.data for t in request.inputs if t.data)
    with grpc.insecure_channel(address) as channel:
        return _grpc_reply(service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer, message)


def grpc_infer_bytes(address: str, payload: bytes) -> Reply:
    """A ModelInfer call whose body is not a protobuf message at all."""
    with grpc.insecure_channel(address) as channel:
        return _grpc_reply(channel.unary_unary(GRPC_INFER), payload)


def send(protocol: str, address: str, request: Request) -> Reply:
    return http_infer(address, request) if protocol == "http" else grpc_infer(address, request)
