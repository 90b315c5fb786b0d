"""One inference request, built once into what goes on the wire, and its answer read back.

TritonClient.prepare() builds; a parity check sends a request once and reads every output, a
load generator sends it again and again and looks only at the status. Both go through here,
and both use tritonclient's own pieces: InferInput / InferRequestedOutput (with their
shared-memory form), HTTP's generate_request_body and parse_response_body, gRPC's
ModelInferRequest and InferResult. So what load measures is what parity proves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request
from tritonclient.utils import serialize_byte_tensor, triton_to_np_dtype

from pytest_triton.base.dtypes import Array, tensor_type
from pytest_triton.client.wire.grpc_h2 import GrpcFrames
from pytest_triton.client.wire.http_conn import HttpReply, raise_for_status, request_bytes
from pytest_triton.client.wire.shm import ALIGNMENT, Block, SharedMemory

Protocol = Literal["http", "grpc"]
RawAnswer = HttpReply | bytes
"""An answer as it came back, not decoded: the HTTP reply, or gRPC's ModelInferResponse
message."""


@dataclass(eq=False)
class PreparedRequest:
    """A request built once (inputs serialized or placed in shared memory, outputs named) and
    sent as often as wanted. `wire` is what goes out: the whole HTTP request, or the
    serialized ModelInferRequest (and `frames`, its HTTP/2 DATA for grpc_h2). release() gives
    its shared memory blocks back (also on leaving a `with` block); an unreleased request's
    blocks go when its client closes."""

    model: str
    version: str
    protocol: Protocol
    wire: bytes
    output_names: list[str] | None  # None: all the model has
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # to explain rejections
    shm_outputs: dict[str, Block] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    memory: SharedMemory | None = None
    frames: GrpcFrames | None = None  # gRPC only
    # tritonclient's InferInput / InferRequestedOutput: what the checks send with its infer()
    inputs: list[Any] = field(default_factory=list)
    requested: list[Any] | None = None

    @property
    def shared_memory(self) -> str:
        return self.memory.transport if self.memory is not None else "none"

    def release(self) -> None:
        blocks, self.blocks = self.blocks, []
        if self.memory is not None:
            for block in blocks:
                self.memory.release(block)

    def __enter__(self) -> PreparedRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def infer_path(model: str, version: str) -> str:
    return f"/v2/models/{quote(model)}" + (f"/versions/{version}" if version else "") + "/infer"


def output_bytes(
    outputs: Sequence[Mapping[str, Any]], batch: int | None, fallback: int
) -> dict[str, int]:
    """Bytes each output needs for `batch` rows, from the model's metadata (shapes with -1
    for the batch dimension when `batch` is given); `fallback` where the metadata cannot tell
    (variable dimensions, BYTES)."""
    sizes = {}
    for out in outputs:
        dims = list(out["shape"])
        if batch is not None and dims:
            dims[0] = batch
        if out["datatype"] == "BYTES" or any(d < 0 for d in dims):
            sizes[out["name"]] = fallback
        else:
            itemsize = np.dtype(triton_to_np_dtype(out["datatype"])).itemsize
            sizes[out["name"]] = math.prod(dims) * itemsize
    return sizes


def _payload(array: Array, wire_type: str) -> tuple[Array, int]:
    """What a tensor puts in shared memory, and its size (BYTES: tritonclient's
    length-prefixed serialization)."""
    if wire_type == "BYTES":
        serialized = serialize_byte_tensor(array)
        return serialized, len(serialized.item()) if serialized.size else 0
    return array, array.nbytes


def build_request(
    protocol: Protocol,
    hostport: str,
    model: str,
    inputs: Mapping[str, Array],
    outputs: Sequence[str] | None,
    version: str = "",
    *,
    memory: SharedMemory | None = None,
    output_sizes: Mapping[str, int] | None = None,
    headers: Mapping[str, str] | None = None,
) -> PreparedRequest:
    """The request for `inputs`. With `memory`, inputs are written to its blocks and every
    output in `outputs` (required then, with `output_sizes`) gets a block to be answered in.
    `headers` go into an HTTP request (gRPC's travel in each connection's HEADERS block)."""
    module: Any = httpclient if protocol == "http" else grpcclient
    request = PreparedRequest(
        model, version, protocol, b"", list(outputs) if outputs is not None else None, memory=memory
    )
    request.input_shapes = {name: list(array.shape) for name, array in inputs.items()}
    try:
        infer_inputs = [
            _input(module, protocol, name, np.ascontiguousarray(array), request)
            for name, array in inputs.items()
        ]
        requested = None
        if outputs is not None:
            requested = [_output(module, protocol, name, request, output_sizes) for name in outputs]
        request.inputs, request.requested = infer_inputs, requested
        if protocol == "http":
            body, json_size = httpclient.InferenceServerClient.generate_request_body(
                infer_inputs, outputs=requested
            )
            request.wire = request_bytes(
                hostport, infer_path(model, version), body, json_size, headers
            )
        else:
            message = _get_inference_request(
                model, infer_inputs, version, "", requested, 0, False, False, 0, None, None
            )
            request.wire = message.SerializeToString()
            request.frames = GrpcFrames.of(request.wire)
    except BaseException:
        request.release()
        raise
    return request


def _input(
    module: Any, protocol: Protocol, name: str, array: Array, request: PreparedRequest
) -> Any:
    wire_type = tensor_type(array.dtype).wire
    item = module.InferInput(name, list(array.shape), wire_type)
    memory = request.memory
    if memory is None:
        if protocol == "http":
            item.set_data_from_numpy(array, binary_data=True)
        else:
            item.set_data_from_numpy(array)
        return item
    data, size = _payload(array, wire_type)
    block = memory.alloc(size)
    request.blocks.append(block)
    if size:
        memory.write(block, data)
    item.set_shared_memory(block.name, size, offset=block.offset)
    return item


def _output(
    module: Any,
    protocol: Protocol,
    name: str,
    request: PreparedRequest,
    sizes: Mapping[str, int] | None,
) -> Any:
    item = (
        module.InferRequestedOutput(name, binary_data=True)
        if protocol == "http"
        else module.InferRequestedOutput(name)
    )
    memory = request.memory
    if memory is not None:
        if sizes is None or name not in sizes:
            raise ValueError(f"no shared memory size for output {name!r}")
        block = memory.alloc(sizes[name])
        request.blocks.append(block)
        request.shm_outputs[name] = block
        item.set_shared_memory(block.name, sizes[name], offset=block.offset)
    return item


def reserve(
    memory: SharedMemory,
    inputs: Sequence[Mapping[str, Array]],
    output_sizes: Mapping[str, int] | None,
    count: int | None = None,
) -> None:
    """Room for several requests' blocks in one registration (a load user's batches)."""

    def aligned(n: int) -> int:
        return max(ALIGNMENT, -(-n // ALIGNMENT) * ALIGNMENT)

    total = sum(
        aligned(_payload(np.ascontiguousarray(a), tensor_type(a.dtype).wire)[1])
        for batch in inputs
        for a in batch.values()
    )
    total += len(inputs) * sum(aligned(n) for n in (output_sizes or {}).values())
    memory.reserve(total)


# -- answers ---------------------------------------------------------------------------------
def answer_size(raw: RawAnswer) -> int:
    """The answer's size as it came over the wire (HTTP body, gRPC message)."""
    return len(raw.body) if isinstance(raw, HttpReply) else len(raw)


def read_answer(request: PreparedRequest, raw: RawAnswer) -> dict[str, Array]:
    """Every output of an answer of either protocol (see read_http, read_grpc)."""
    if isinstance(raw, HttpReply):
        return read_http(request, raw)
    return read_grpc(request, raw)


_RAW_OUTPUT_CONTENTS = 6  # ModelInferResponse's field number of the output tensors' bytes


def answer_header(raw: RawAnswer) -> bytes:
    """The part of an answer that names its outputs, their datatypes, shapes (and
    shared-memory places) and none of their data: the JSON header of an HTTP answer, the
    gRPC message up to its raw_output_contents. Two answers of equal length and equal
    headers have outputs of the same names, datatypes and shapes."""
    if isinstance(raw, HttpReply):
        body = raw.body
        return bytes(body if raw.header_length is None else body[: raw.header_length])
    position = 0
    while position < len(raw):  # fields in number order, as protobuf serializes them
        start = position
        tag, position = _varint(raw, position)
        field, kind = tag >> 3, tag & 7
        if field == _RAW_OUTPUT_CONTENTS:
            return bytes(raw[:start])
        if kind == 0:
            _, position = _varint(raw, position)
        elif kind == 2:
            length, position = _varint(raw, position)
            position += length
        elif kind in (1, 5):
            position += 8 if kind == 1 else 4
        else:
            break  # not a message we know: the whole answer is its header
    return bytes(raw)


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def read_http(request: PreparedRequest, reply: HttpReply) -> dict[str, Array]:
    """Every output of an HTTP answer (an error answer raises InferenceServerException)."""
    raise_for_status(reply)
    result = httpclient.InferenceServerClient.parse_response_body(
        bytes(reply.body),
        header_length=reply.header_length,
        content_encoding=reply.content_encoding,
    )
    return read_result(request, result)


def read_grpc(request: PreparedRequest, answer: bytes) -> dict[str, Array]:
    response = service_pb2.ModelInferResponse.FromString(answer)
    return read_result(request, grpcclient.InferResult(response))


def read_result(request: PreparedRequest, result: Any) -> dict[str, Array]:
    """Every output of tritonclient's InferResult of either protocol (outputs placed in
    shared memory read from their blocks)."""
    response = result.get_response()
    if isinstance(response, dict):  # HTTP
        described = {o["name"]: (o["datatype"], o["shape"]) for o in response.get("outputs", [])}
    else:
        described = {o.name: (o.datatype, list(o.shape)) for o in response.outputs}
    return _outputs(request, result, described)


def _outputs(
    request: PreparedRequest, result: Any, described: Mapping[str, tuple[str, list[int]]]
) -> dict[str, Array]:
    names = request.output_names if request.output_names is not None else list(described)
    found: dict[str, Array] = {}
    for name in names:
        block = request.shm_outputs.get(name)
        if block is not None and request.memory is not None and name in described:
            datatype, shape = described[name]
            found[name] = request.memory.read(block, triton_to_np_dtype(datatype), shape)
        else:
            found[name] = _as_numpy(result, name)
    return found


def _as_numpy(result: Any, name: str) -> Array:
    """An output as numpy; an output that came back with no data at all (the bundled python
    stub under numpy >= 2 answers so) is returned empty for parity to name, instead of
    tritonclient's "cannot reshape array of size 0"."""
    try:
        array: Array = result.as_numpy(name)
        return array
    except ValueError:
        output = result.get_output(name)
        if output is None:
            raise
        if isinstance(output, dict):  # HTTP
            size = (output.get("parameters") or {}).get("binary_data_size")
            empty = size == 0 or (size is None and not output.get("data"))
            datatype = output["datatype"]
        else:  # gRPC: raw contents are in the order of the outputs
            index = [o.name for o in result.get_response().outputs].index(name)
            raw = result.get_response().raw_output_contents
            empty = index < len(raw) and len(raw[index]) == 0
            datatype = output.datatype
        if not empty:
            raise
        return np.empty(0, dtype=triton_to_np_dtype(datatype))
