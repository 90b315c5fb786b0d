"""One client for one server, protocol and transport: the one request path.

Tests parametrized over protocols and transports call the same methods. Inference goes
`prepare()` (built once, see wire/request.py) then `send()` (every output, for parity) or
`send_status()` (the status only, for load); health, model control, metadata and statistics
go through tritonclient's own clients. Every server-side rejection becomes an InferenceError
naming the model, the protocol and Triton's own message, every transport failure (refused,
reset, timed out) an InferenceError naming the server, and any failure of a request to a
server that died the ServerError saying how it died.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from pytest_triton.base import watched_servers as health
from pytest_triton.base.dtypes import TYPES, Array, tensor_type
from pytest_triton.base.errors import (
    InferenceError,
    ServerError,
    SharedMemoryError,
    SpecError,
    TritonTestError,
)
from pytest_triton.base.security import PLAIN, Security
from pytest_triton.base.watched_servers import ServerHealth
from pytest_triton.client import failures as request_errors
from pytest_triton.client.failures import request_problem
from pytest_triton.client.wire import grpc_h2
from pytest_triton.client.wire import request as wire
from pytest_triton.client.wire.grpc_call import GrpcInfer, rpc_error
from pytest_triton.client.wire.http_conn import HttpConnections, raise_for_status
from pytest_triton.client.wire.http_control import PerThreadControl, WithHeaders
from pytest_triton.client.wire.lane import GrpcLane, HttpLane, Lane
from pytest_triton.client.wire.request import PreparedRequest, Protocol
from pytest_triton.client.wire.shm import (
    DEFAULT_OUTPUT_BYTES,
    ID_SUFFIX,
    SharedMemory,
    Transport,
    check_offered,
)

PROTOCOLS: tuple[Protocol, ...] = ("http", "grpc")
__all__ = ["PROTOCOLS", "PreparedRequest", "Protocol", "ServerHealth", "Transport", "TritonClient"]
Tensors = Mapping[str, Array]
T = TypeVar("T")


NOT_NUMBERS = frozenset(
    {
        "name",
        "version",
        "versions",
        "platform",
        "backend",
        "datatype",
        "data_type",
        "reason",
        "key",
        "string_value",
    }
)


def _as_dict(message: Any) -> dict[str, Any]:
    """A gRPC answer as the HTTP API writes the same answer: fields left at their defaults
    included (protobuf's JSON drops them), 64-bit integers as ints."""
    return dict(
        _intify(
            json_format.MessageToDict(
                message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
        )
    )


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


def release_connections(hostports: Iterable[str]) -> None:
    """Close this process's idle keep-alive connections to a server about to stop: Triton's
    graceful shutdown waits for every open connection up to its exit timeout (a client left
    open made a stop take 11 s over HTTP and 15 s over gRPC instead of 3)."""
    wanted = {health.address_key(h) for h in hostports}
    for client in list(_LIVE):
        if health.address_key(client.url) in wanted:
            with contextlib.suppress(Exception):
                client.release_idle()


class TritonClient:
    """One protocol's client for one server, sending tensors in the request (transport
    "none") or through shared memory ("system", "cuda": servers on this machine only)."""

    def __init__(
        self,
        url: str,
        protocol: Protocol = "http",
        *,
        timeout_s: float = 120.0,
        concurrency: int = 16,
        server: ServerHealth | None = None,
        shared_memory: Transport = "none",
        output_shared_memory_size: int = DEFAULT_OUTPUT_BYTES,
        security: Security = PLAIN,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        # A server this process started is found by its address: a client made from a bare URL
        # still learns at once that it died (and whether it maps this machine's memory).
        server = server if server is not None else health.find(url)
        check_offered(
            shared_memory,
            url,
            host_memory=getattr(server, "host_memory", None),
            server_gpu=getattr(server, "cuda_memory", None),
        )
        self.url = url
        self.protocol: Protocol = protocol
        self.security = security
        self._headers = security.header_values()  # values for the wire only; never printed
        self.shared_memory: Transport = shared_memory
        self.output_shared_memory_size = output_shared_memory_size
        self.timeout_s = timeout_s
        self.server = server
        self._outputs: dict[tuple[str, str], list[str]] = {}
        self._signatures: dict[tuple[str, str], tuple[list[dict[str, Any]], bool]] = {}
        self._memory: SharedMemory | None = None
        self._lock = threading.Lock()
        self._http: HttpConnections | None = None
        self._grpc: GrpcInfer | None = None
        self._h2: grpc_h2.GrpcConnections | None = None
        if protocol == "http":
            self._client: Any = PerThreadControl(
                functools.partial(
                    httpclient.InferenceServerClient,
                    url,
                    concurrency=concurrency,
                    connection_timeout=timeout_s,
                    network_timeout=timeout_s,
                    **self._http_tls(),
                )
            )
            if self._headers:
                self._client = WithHeaders(self._client, self._headers)
            self._http = HttpConnections(url, timeout_s, security)
        else:
            self._client = self._grpc_control()
            self._grpc = GrpcInfer(url, security)
        _LIVE.add(self)

    def _http_tls(self) -> dict[str, Any]:
        """tritonclient.http's TLS arguments: our context (CA bundle, client certificate)."""
        security = self.security
        if not security.tls:
            return {}
        options = {"server_hostname": security.server_name} if security.server_name else {}
        return {
            "ssl": True,
            "ssl_options": options,
            "ssl_context_factory": lambda **_: security.ssl_context(),
        }

    def _grpc_control(self) -> Any:
        security = self.security
        client: Any
        if security.tls:
            name = security.server_name
            client = grpcclient.InferenceServerClient(
                self.url,
                ssl=True,
                root_certificates=security.ca_file,
                private_key=security.key_file,
                certificate_chain=security.cert_file,
                channel_args=[("grpc.ssl_target_name_override", name)] if name else None,
            )
        else:
            client = grpcclient.InferenceServerClient(self.url)
        return WithHeaders(client, self._headers) if self._headers else client

    @property
    def id(self) -> str:
        """The test id: `http`, `grpc`, `http-shm`, `grpc-cuda-shm`."""
        return self.protocol + ID_SUFFIX[self.shared_memory]

    def __repr__(self) -> str:
        return f"TritonClient({self.protocol}://{self.url}, shared_memory={self.shared_memory})"

    @property
    def shared_memory_regions(self) -> list[str]:
        """Names of the regions this client holds registered (none before its first request
        over shared memory and after close())."""
        memory = self._memory
        return memory.region_names if memory is not None else []

    def release_idle(self) -> None:
        """Close the keep-alive connections no request is using; the next request or call
        opens new ones."""
        for pool in (self._http, self._h2):
            if pool is not None:
                pool.close_idle()
        if self.protocol == "http":
            self._client.close()  # PerThreadControl: a thread's next call makes a new one
        else:
            control, self._client = self._client, self._grpc_control()
            control.close()

    def close(self) -> None:
        """Unregister and unlink its shared memory, close its connections; idempotent."""
        with self._lock:
            memory, self._memory = self._memory, None
        try:
            if memory is not None:
                memory.close()
        finally:
            if self._http is not None:
                self._http.close()
            if self._grpc is not None:
                self._grpc.close()
            if self._h2 is not None:
                self._h2.close()
            self._client.close()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors (request_errors says what each failure means) ----------------------------
    def _call(
        self,
        model: str,
        fn: Callable[[], T],
        version: str = "",
        request: PreparedRequest | None = None,
        *,
        named: bool = True,
    ) -> T:
        problem = request_problem(model, version) if named else None
        if problem is not None:
            raise request_errors.refused(self, model, problem)
        try:
            if self.server is not None:
                self.server.raise_if_dead()
            return fn()
        except Exception as exc:  # sockets and gRPC raise their own transport errors
            failure = self._failure(model, exc, version, request)
            if failure is exc:  # already ours: keep its traceback
                raise
            raise failure from None

    def _failure(
        self, model: str, exc: Exception, version: str = "", request: PreparedRequest | None = None
    ) -> Exception:
        """What a request's failure means: Triton's rejection, the server's death, or where
        and how the connection failed."""
        if isinstance(exc, InferenceServerException):
            return self._rejected(model, exc, version, request)
        if isinstance(exc, ServerError):
            return request_errors.died(self, model, exc)
        if isinstance(exc, TritonTestError):
            return exc
        return request_errors.unexpected(self, model, exc)

    def _rejected(
        self,
        model: str,
        exc: InferenceServerException,
        version: str = "",
        request: PreparedRequest | None = None,
    ) -> Exception:
        message = exc.message() or str(exc)
        if self.shared_memory != "none" and "shared memory size specified" in message:
            return SharedMemoryError(
                f"{self.protocol} request to model {model!r}: {message} (raise "
                "--triton-output-shared-memory-size, the bytes each output gets when the "
                "model's metadata does not fix its size)"
            )
        shapes = request.input_shapes if request is not None else None
        return request_errors.rejected(
            self, model, exc, version, shapes, self._versions_of, self._repository_state
        )

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
                index = self._call(
                    model, lambda: self._client.get_model_repository_index(as_json=True)
                ).get("models", [])
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
        return bool(self._call(model, lambda: self._client.is_model_ready(model, version), version))

    def load_model(
        self, model: str, config: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        self._call(
            model,
            lambda: self._client.load_model(
                model, config=config, files=dict(files) if files else None
            ),
        )

    def unload_model(self, model: str) -> None:
        self._call(model, lambda: self._client.unload_model(model))

    def server_metadata(self) -> dict[str, Any]:
        """Triton's name, version and extensions (the same keys on both protocols)."""
        if self.protocol == "http":
            return dict(self._call("-", self._client.get_server_metadata, named=False))
        return dict(
            self._call("-", lambda: self._client.get_server_metadata(as_json=True), named=False)
        )

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
            return dict(
                self._call(model, lambda: self._client.get_model_metadata(model, version), version)
            )
        got = self._call(model, lambda: self._client.get_model_metadata(model, version), version)
        return _as_dict(got)

    def statistics(self, model: str, version: str = "") -> dict[str, Any]:
        """The statistics API's answer for one model, counters as ints on both protocols."""
        got = self._call(
            model, lambda: self._client.get_inference_statistics(model, version), version
        )
        return dict(_intify(got)) if self.protocol == "http" else _as_dict(got)

    # -- inference -----------------------------------------------------------------------
    def output_names(self, model: str, version: str = "") -> list[str]:
        key = (model, version)
        if key not in self._outputs:
            meta = self.model_metadata(model, version)
            self._outputs[key] = [o["name"] for o in meta.get("outputs", [])]
        return self._outputs[key]

    def _signature(self, model: str, version: str) -> tuple[list[dict[str, Any]], bool]:
        """The model's outputs (metadata) and whether it batches (config), asked once."""
        key = (model, version)
        if key not in self._signatures:
            outputs = self.model_metadata(model, version).get("outputs", [])
            batched = int(self.model_config(model).get("max_batch_size", 0) or 0) > 0
            self._signatures[key] = (list(outputs), batched)
        return self._signatures[key]

    def _shared_memory(self) -> SharedMemory:
        with self._lock:
            if self._memory is None:
                kwargs = {"client_timeout": self.timeout_s} if self.protocol == "grpc" else {}
                self._memory = SharedMemory(self.shared_memory, self._client, **kwargs)
            return self._memory

    def _output_sizes(
        self, model: str, version: str, names: Sequence[str], inputs: Tensors
    ) -> dict[str, int]:
        outputs, batched = self._signature(model, version)
        batch = next(iter(inputs.values())).shape[0] if batched and inputs else None
        sizes = wire.output_bytes(outputs, batch, self.output_shared_memory_size)
        missing = [n for n in names if n not in sizes]
        if missing:
            raise InferenceError(
                model,
                self.protocol,
                f"model {model!r} has no output(s) {missing}; it has {sorted(sizes)}",
            )
        return {n: sizes[n] for n in names}

    def prepare(
        self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None, version: str = ""
    ) -> PreparedRequest:
        """Build a request once; outputs None asks for all the model has (over shared memory
        that takes the model's metadata, asked once per model)."""
        return self.prepare_all(model, [inputs], outputs, version)[0]

    def prepare_all(
        self,
        model: str,
        batches: Sequence[Tensors],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> list[PreparedRequest]:
        """Several requests of one model; over shared memory their blocks share one
        registered region (a load user's distinct batches)."""
        problem = request_problem(model, version)
        if problem is not None:
            raise request_errors.refused(self, model, problem)
        batches = [self._wire_ready(model, b) for b in batches]
        if self.shared_memory == "none":
            return [
                wire.build_request(
                    self.protocol, self.url, model, b, outputs, version, headers=self._headers
                )
                for b in batches
            ]
        return self._call(
            model, lambda: self._prepare_in_memory(model, batches, outputs, version), version
        )

    def _wire_ready(self, model: str, inputs: Tensors) -> dict[str, Array]:
        """Contiguous arrays Triton has a datatype for (numpy str arrays travel as BYTES,
        UTF-8 encoded); any other dtype is refused naming the input."""
        ready = {}
        for name, array in inputs.items():
            array = np.ascontiguousarray(array)
            if array.dtype.kind == "U":
                array = array.astype(object)
            try:
                tensor_type(array.dtype)
            except SpecError:
                raise request_errors.refused(
                    self,
                    model,
                    (
                        f"input {name!r} has numpy dtype {array.dtype}, which no Triton datatype "
                        f"matches ({', '.join(t.wire for t in TYPES)}): convert it first, e.g. "
                        "array.astype(np.float32)"
                    ),
                ) from None
            ready[name] = array
        return ready

    def _prepare_in_memory(
        self, model: str, batches: Sequence[Tensors], outputs: Sequence[str] | None, version: str
    ) -> list[PreparedRequest]:
        names = list(outputs) if outputs is not None else self.output_names(model, version)
        memory = self._shared_memory()
        sizes = [self._output_sizes(model, version, names, b) for b in batches]
        wire.reserve(memory, batches, sizes[0] if sizes else None)
        built: list[PreparedRequest] = []
        try:
            for batch, size in zip(batches, sizes, strict=True):
                built.append(
                    wire.build_request(
                        self.protocol,
                        self.url,
                        model,
                        batch,
                        names,
                        version,
                        memory=memory,
                        output_sizes=size,
                        headers=self._headers,
                    )
                )
        except BaseException:
            for request in built:
                request.release()
            raise
        return built

    def send(self, request: PreparedRequest) -> dict[str, Array]:
        """Send a prepared request; every output it asked for, by name."""
        http = self._http
        if http is not None:
            reply = self._call(
                request.model, lambda: http.exchange(request.wire), request.version, request
            )
            return self._call(
                request.model, lambda: wire.read_http(request, reply), request.version, request
            )
        answer = self._call(
            request.model, lambda: self._grpc_exchange(request), request.version, request
        )
        return self._call(
            request.model, lambda: wire.read_grpc(request, answer), request.version, request
        )

    def send_status(self, request: PreparedRequest) -> int:
        """Send a prepared request and read no more of the answer than whether it succeeded
        (the HTTP status and Triton's error, or the gRPC status): what a load generator's
        verdict needs. Returns the answer's size in bytes as it came over the wire (the HTTP
        body, the gRPC message; over shared memory the outputs are not in it). Failures raise
        as send()'s do."""
        http = self._http
        if http is not None:
            reply = self._call(
                request.model, lambda: http.exchange(request.wire), request.version, request
            )
            if not reply.ok:
                self._call(request.model, lambda: raise_for_status(reply), request.version, request)
            return len(reply.body)
        answer = self._call(
            request.model, lambda: self._grpc_exchange(request), request.version, request
        )
        return len(answer)

    def lane(self) -> Lane[Any] | None:
        """A connection of its own for a driver that waits on many sockets at once (the load
        multiplexer), sending prepared requests as send_status() does and failing as it
        does; None where that path is not available (gRPC without `hpack`, or over CUDA
        shared memory: those go through the gRPC channel). The caller closes it."""

        def failure(request: PreparedRequest, exc: Exception) -> Exception:
            return self._failure(request.model, exc, request.version, request)

        if self.security.tls:
            return None  # the multiplexer reads raw sockets: TLS stays on the blocking path
        if self._http is not None:
            return HttpLane(self.url, self.timeout_s, failure)
        lean = self._lean_grpc()
        return GrpcLane(lean, failure) if lean is not None else None

    def _grpc_exchange(self, request: PreparedRequest) -> bytes:
        """The answer's message: over HTTP/2 spoken directly (grpc_h2, a third of grpcio's CPU
        per request under gevent) where `hpack` (the load extra) is installed and the
        transport is none or system shared memory, else through the gRPC channel."""
        lean = self._lean_grpc() if request.frames is not None else None
        if lean is not None:
            assert request.frames is not None
            return lean.exchange(request.frames)
        assert self._grpc is not None
        return self._grpc.exchange(request.wire, self.timeout_s)

    def _lean_grpc(self) -> grpc_h2.GrpcConnections | None:
        if self._h2 is None:
            # CUDA regions stay on the channel: no GPU here to prove the direct path with them.
            if self.shared_memory == "cuda" or not grpc_h2.h2_available():
                return None
            with self._lock:
                if self._h2 is None:
                    self._h2 = grpc_h2.GrpcConnections(self.url, self.timeout_s, self.security)
        return self._h2

    def _read_answer(self, request: PreparedRequest, call: Any) -> dict[str, Array]:
        """The outputs of a gRPC request in flight, its failure in tritonclient's form."""
        try:
            answer: bytes = call.result()
        except grpc.RpcError as exc:
            raise rpc_error(exc) from None
        return wire.read_grpc(request, answer)

    def infer(
        self, model: str, inputs: Tensors, outputs: Sequence[str] | None = None, version: str = ""
    ) -> dict[str, Array]:
        """One request; returns every requested output (all the model's outputs by default,
        in the order its metadata lists them)."""
        names = list(outputs) if outputs is not None else self.output_names(model, version)
        with self.prepare(model, inputs, names, version) as request:
            return self.send(request)

    def infer_many(
        self,
        model: str,
        requests: Sequence[Tensors],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> list[dict[str, Array]]:
        """Send all requests at once (so the dynamic batcher can combine them); answers in
        request order."""
        names = list(outputs) if outputs is not None else self.output_names(model, version)
        if self.protocol == "http" or self._lean_grpc() is not None:
            return self._infer_many_threads(model, requests, names, version)
        built = self.prepare_all(model, requests, names, version)
        channel = self._grpc
        assert channel is not None
        try:
            calls = [
                self._call(model, functools.partial(channel.start, r.wire, self.timeout_s), version)
                for r in built
            ]
            return [
                self._call(
                    model, functools.partial(self._read_answer, request, call), version, request
                )
                for request, call in zip(built, calls, strict=True)
            ]
        finally:
            for request in built:
                request.release()

    def _infer_many_threads(
        self, model: str, requests: Sequence[Tensors], names: list[str], version: str
    ) -> list[dict[str, Array]]:
        """One thread and connection per request in flight (HTTP/1.1, or HTTP/2 with one
        stream per connection), all prepared before the first is sent."""
        built = self.prepare_all(model, requests, names, version)
        try:
            with ThreadPoolExecutor(max_workers=min(len(built), 64) or 1) as pool:
                return list(pool.map(self.send, built))
        finally:
            for request in built:
                request.release()


_LIVE: weakref.WeakSet[TritonClient] = weakref.WeakSet()
