"""tritonclient's HTTP and gRPC clients behind one small interface.

Tests parametrized over protocols call the same methods; every server-side rejection
becomes an InferenceError naming the model, the protocol and Triton's own message, every
transport failure (refused, reset, timed out) an InferenceError naming the server, and any
failure of a request to a server that died the ServerError saying how it died.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from . import health, request_errors
from .dtypes import TYPES, tensor_type
from .errors import ServerError, SpecError, TritonTestError
from .health import ServerHealth
from .request_errors import request_problem

Protocol = Literal["http", "grpc"]
PROTOCOLS: tuple[Protocol, ...] = ("http", "grpc")
Tensors = Mapping[str, np.ndarray]
T = TypeVar("T")


NOT_NUMBERS = frozenset({"name", "version", "versions", "platform", "backend", "datatype",
                         "data_type", "reason", "key", "string_value"})


def _as_dict(message: Any) -> dict[str, Any]:
    """A gRPC answer as the HTTP API writes the same answer: fields left at their defaults
    included (protobuf's JSON drops them), 64-bit integers as ints."""
    return dict(_intify(json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)))


def _intify(value: Any, key: str = "") -> Any:
    """gRPC's JSON form writes 64-bit integers (counters, shapes) as strings; HTTP writes
    numbers. Names and versions stay strings on both."""
    if isinstance(value, dict):
        return {k: _intify(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_intify(v, key) for v in value]
    if isinstance(value, str) and key not in NOT_NUMBERS and value.lstrip("-").isdigit():
        return int(value)
    return value


@dataclass(frozen=True)
class PreparedRequest:
    """An inference request built once (tensors serialized, outputs named), to be sent as
    often as wanted: parity checks send it once, load generators in a loop."""

    model: str
    version: str
    inputs: list[Any]  # tritonclient InferInput, data already attached
    outputs: list[Any] | None  # tritonclient InferRequestedOutput; None: all the model has
    output_names: list[str] | None


class TritonClient:
    """One protocol's client for one server."""

    def __init__(self, url: str, protocol: Protocol = "http", *, timeout_s: float = 120.0,
                 concurrency: int = 16, server: ServerHealth | None = None) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        self.url = url
        self.protocol: Protocol = protocol
        self.timeout_s = timeout_s
        # A server this process started is found by its address: a client made from a bare URL
        # still learns at once that it died.
        self.server = server if server is not None else health.find(url)
        self._outputs: dict[tuple[str, str], list[str]] = {}
        self._mod: Any = httpclient if protocol == "http" else grpcclient
        if protocol == "http":
            self._client: Any = httpclient.InferenceServerClient(
                url, concurrency=concurrency, connection_timeout=timeout_s,
                network_timeout=timeout_s)
        else:
            self._client = grpcclient.InferenceServerClient(url)

    def __repr__(self) -> str:
        return f"TritonClient({self.protocol}://{self.url})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors (request_errors says what each failure means) ----------------------------
    def _call(self, model: str, fn: Callable[[], T], version: str = "",
              request: PreparedRequest | None = None, *, named: bool = True) -> T:
        problem = request_problem(model, version) if named else None
        if problem is not None:
            raise request_errors.refused(self, model, problem)
        try:
            if self.server is not None:
                self.server.raise_if_dead()
            return fn()
        except InferenceServerException as exc:
            raise self._rejected(model, exc, version, request) from None
        except ServerError as death:
            raise request_errors.died(self, model, death) from None
        except TritonTestError:
            raise
        except Exception as exc:  # geventhttpclient and gRPC raise their own transport errors
            raise request_errors.unexpected(self, model, exc) from None

    def _rejected(self, model: str, exc: InferenceServerException, version: str = "",
                  request: PreparedRequest | None = None) -> Exception:
        shapes = {i.name(): i.shape() for i in request.inputs} if request else None
        return request_errors.rejected(self, model, exc, version, shapes, self._versions_of,
                                       self._repository_state)

    def _versions_of(self, model: str) -> list[str] | None:
        """The versions the server has of a model, to name them after a version error."""
        try:
            return [str(v) for v in self.model_metadata(model).get("versions", [])]
        except TritonTestError:
            return None

    def _repository_state(self, model: str) -> str | None:
        """How the server's repository index lists a model it does not serve ('' for a model
        never loaded), or None when the repository has no such model."""
        try:
            if self.protocol == "http":
                index = self._call(model, self._client.get_model_repository_index)
            else:
                index = self._call(model, lambda: self._client.get_model_repository_index(
                    as_json=True)).get("models", [])
        except TritonTestError:
            return None
        for entry in index:
            if entry.get("name") == model:
                return ", ".join(str(entry[k]) for k in ("state", "reason") if entry.get(k))
        return None

    # -- health and model control ---------------------------------------------------------
    def is_server_ready(self) -> bool:
        return bool(self._call("-", self._client.is_server_ready, named=False))

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return bool(self._call(model, lambda: self._client.is_model_ready(model, version),
                               version))

    def load_model(self, model: str, config: str | None = None,
                   files: Mapping[str, bytes] | None = None) -> None:
        self._call(model, lambda: self._client.load_model(
            model, config=config, files=dict(files) if files else None))

    def unload_model(self, model: str) -> None:
        self._call(model, lambda: self._client.unload_model(model))

    def server_metadata(self) -> dict[str, Any]:
        """Triton's name, version and extensions (the same keys on both protocols)."""
        if self.protocol == "http":
            return dict(self._call("-", self._client.get_server_metadata))
        return dict(self._call("-", lambda: self._client.get_server_metadata(as_json=True)))

    def model_config(self, model: str) -> dict[str, Any]:
        """The model's configuration as the server completed it (the same on both
        protocols)."""
        if self.protocol == "http":
            return dict(self._call(model, lambda: self._client.get_model_config(model)))
        got = self._call(model, lambda: self._client.get_model_config(model))
        return _as_dict(got.config)

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        """Name, versions, platform, inputs and outputs (shapes as ints on both protocols)."""
        if self.protocol == "http":
            return dict(self._call(
                model, lambda: self._client.get_model_metadata(model, version), version))
        got = self._call(model, lambda: self._client.get_model_metadata(model, version),
                         version)
        return _as_dict(got)

    def statistics(self, model: str, version: str = "") -> dict[str, Any]:
        """The statistics API's answer for one model, counters as ints on both protocols."""
        got = self._call(model, lambda: self._client.get_inference_statistics(model, version),
                         version)
        return dict(_intify(got)) if self.protocol == "http" else _as_dict(got)

    # -- inference -----------------------------------------------------------------------
    def output_names(self, model: str, version: str = "") -> list[str]:
        key = (model, version)
        if key not in self._outputs:
            meta = self.model_metadata(model, version)
            self._outputs[key] = [o["name"] for o in meta.get("outputs", [])]
        return self._outputs[key]

    def prepare(self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None,
                version: str = "") -> PreparedRequest:
        """Build a request once; outputs None asks for all the model has (without a metadata
        round trip)."""
        names = list(outputs) if outputs is not None else None
        infer_inputs = []
        for name, array in inputs.items():
            array = np.ascontiguousarray(array)
            if array.dtype.kind == "U":  # numpy str arrays travel as BYTES, UTF-8 encoded
                array = array.astype(object)
            item = self._mod.InferInput(name, list(array.shape), self._wire_type(model, name,
                                                                                 array))
            if self.protocol == "http":
                item.set_data_from_numpy(array, binary_data=True)
            else:
                item.set_data_from_numpy(array)
            infer_inputs.append(item)
        requested: list[Any] | None = None
        if names is not None and self.protocol == "http":
            requested = [httpclient.InferRequestedOutput(n, binary_data=True) for n in names]
        elif names is not None:
            requested = [grpcclient.InferRequestedOutput(n) for n in names]
        return PreparedRequest(model, version, infer_inputs, requested, names)

    def _wire_type(self, model: str, name: str, array: np.ndarray) -> str:
        try:
            return tensor_type(array.dtype).wire
        except SpecError:
            raise request_errors.refused(self, model, (
                f"input {name!r} has numpy dtype {array.dtype}, which no Triton datatype "
                f"matches ({', '.join(t.wire for t in TYPES)}): convert it first, e.g. "
                "array.astype(np.float32)")) from None

    def send(self, request: PreparedRequest) -> dict[str, np.ndarray]:
        """Send a prepared request; its outputs by name."""
        kwargs: dict[str, Any] = {"model_version": request.version, "outputs": request.outputs}
        if self.protocol == "grpc":
            kwargs["client_timeout"] = self.timeout_s
        result = self._call(request.model, lambda: self._client.infer(
            request.model, request.inputs, **kwargs), request.version, request)
        return self._result(result, request.output_names)

    def _result(self, result: Any, outputs: Sequence[str] | None) -> dict[str, np.ndarray]:
        if outputs is None:
            response = result.get_response()
            outputs = ([o["name"] for o in response.get("outputs", [])]
                       if self.protocol == "http" else [o.name for o in response.outputs])
        return {n: _as_numpy(result, n) for n in outputs}

    def infer(self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None,
              version: str = "") -> dict[str, np.ndarray]:
        """One request; returns every requested output (all the model's outputs by default,
        in the order its metadata lists them)."""
        names = list(outputs) if outputs is not None else self.output_names(model, version)
        return self.send(self.prepare(model, inputs, names, version))

    def infer_many(self, model: str, requests: Sequence[Tensors],
                   outputs: Sequence[str] | None = None,
                   version: str = "") -> list[dict[str, np.ndarray]]:
        """Send all requests at once (so the dynamic batcher can combine them); answers in
        request order."""
        names = list(outputs) if outputs is not None else self.output_names(model, version)
        if self.protocol == "http":
            return self._infer_many_http(model, requests, names, version)
        built = [self.prepare(model, r, names, version) for r in requests]
        done: queue.Queue[tuple[int, Any, Any]] = queue.Queue()

        def callback_for(index: int) -> Callable[[Any, Any], None]:
            return lambda result, error: done.put((index, result, error))

        for index, request in enumerate(built):
            self._call(model, functools.partial(
                self._client.async_infer, model, request.inputs, callback_for(index),
                model_version=version, outputs=request.outputs, client_timeout=self.timeout_s))
        results: list[dict[str, np.ndarray] | None] = [None] * len(built)
        for _ in built:
            try:
                index, result, error = done.get(timeout=self.timeout_s)
            except queue.Empty:
                raise request_errors.transport(self, model, TimeoutError("timed out")) from None
            if error is not None:
                raise self._rejected(model, error, version, built[index])
            results[index] = self._result(result, names)
        return [r for r in results if r is not None]

    def _infer_many_http(self, model: str, requests: Sequence[Tensors], names: list[str],
                         version: str) -> list[dict[str, np.ndarray]]:
        """One thread and connection per request in flight: the HTTP client's own async_infer
        runs its greenlets one after another, which would never let requests batch."""
        local = threading.local()

        def send(inputs: Tensors) -> dict[str, np.ndarray]:
            if not hasattr(local, "client"):
                local.client = TritonClient(self.url, "http", timeout_s=self.timeout_s,
                                            concurrency=1, server=self.server)
                opened.append(local.client)
            return local.client.infer(model, inputs, names, version)

        opened: list[TritonClient] = []
        try:
            with ThreadPoolExecutor(max_workers=min(len(requests), 64) or 1) as pool:
                return list(pool.map(send, requests))
        finally:
            for client in opened:
                client.close()


def _as_numpy(result: Any, name: str) -> np.ndarray:
    """An output as numpy; an output that came back with no data at all (the bundled python
    stub under numpy >= 2 answers so) is returned empty for parity to name, instead of
    tritonclient's "cannot reshape array of size 0"."""
    try:
        return result.as_numpy(name)
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
