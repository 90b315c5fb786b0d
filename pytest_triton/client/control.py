"""The part of a client every other part stands on: the endpoint they share, tritonclient's
control client, every call with its failure mapped to the package's errors (a rejection becomes
an InferenceError naming model, protocol and Triton's message, a transport failure one naming
the server, any failure against a dead server that ServerError), and model control, health,
metadata and statistics through tritonclient's own clients (over TLS and with the client's
headers where asked)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import (
    ServerError,
    SharedMemoryError,
    TritonTestError,
)
from pytest_triton.base.security import Security
from pytest_triton.base.watched_servers import ServerHealth
from pytest_triton.client import failures
from pytest_triton.client.failures import request_problem
from pytest_triton.client.wire.http_control import PerThreadControl, WithHeaders
from pytest_triton.client.wire.request import PreparedRequest, Protocol
from pytest_triton.client.wire.shm import Transport

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


@dataclass(frozen=True)
class Endpoint:
    """What every part of a client shares: where the server is, how it is spoken to and what
    it may be sent. `headers` are the security headers' values, for the wire only (never
    printed)."""

    url: str
    protocol: Protocol
    timeout_s: float
    server: ServerHealth | None
    security: Security
    shared_memory: Transport
    headers: Mapping[str, str] = field(repr=False)


class Control:
    """tritonclient's control client for one endpoint, each call's failure mapped to the
    package's errors, and the control calls: readiness, load/unload, metadata, config,
    statistics, outputs."""

    def __init__(self, endpoint: Endpoint, concurrency: int) -> None:
        self.endpoint = endpoint
        http = endpoint.protocol == "http"
        self.tritonclient: Any = self._http(concurrency) if http else self._grpc()
        self._outputs: dict[tuple[str, str], list[str]] = {}
        self._signatures: dict[tuple[str, str], tuple[list[dict[str, Any]], bool]] = {}

    def call(
        self,
        model: str,
        fn: Callable[[], T],
        version: str = "",
        request: PreparedRequest | None = None,
        *,
        named: bool = True,
    ) -> T:
        """fn() for a request about `model`, refused before it when Triton could never serve
        the name, its failure as failure() says."""
        problem = request_problem(model, version) if named else None
        if problem is not None:
            raise failures.refused(self.endpoint, model, problem)
        try:
            if self.endpoint.server is not None:
                self.endpoint.server.raise_if_dead()
            return fn()
        except Exception as exc:  # sockets and gRPC raise their own transport errors
            failure = self.failure(model, exc, version, request)
            if failure is exc:  # already ours: keep its traceback
                raise
            raise failure from None

    def failure(
        self, model: str, exc: Exception, version: str = "", request: PreparedRequest | None = None
    ) -> Exception:
        """What a request's failure means: Triton's rejection, the server's death, or where
        and how the connection failed."""
        if isinstance(exc, InferenceServerException):
            return self._rejected(model, exc, version, request)
        if isinstance(exc, ServerError):
            return failures.died(self.endpoint, model, exc)
        if isinstance(exc, TritonTestError):
            return exc
        return failures.unexpected(self.endpoint, model, exc)

    def _rejected(
        self,
        model: str,
        exc: InferenceServerException,
        version: str = "",
        request: PreparedRequest | None = None,
    ) -> Exception:
        message = exc.message() or str(exc)
        endpoint = self.endpoint
        if endpoint.shared_memory != "none" and "shared memory size specified" in message:
            return SharedMemoryError(
                f"{endpoint.protocol} request to model {model!r}: {message} (raise "
                "--triton-output-shared-memory-size, the bytes each output gets when the "
                "model's metadata does not fix its size)"
            )
        shapes = request.input_shapes if request is not None else None
        return failures.rejected(
            endpoint, model, exc, version, shapes, self._versions_of, self._repository_state
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
            if self.endpoint.protocol == "http":
                index = self.call(model, self.tritonclient.get_model_repository_index)
            else:
                index = self.call(
                    model, lambda: self.tritonclient.get_model_repository_index(as_json=True)
                ).get("models", [])
        except TritonTestError:
            return None
        for entry in index:
            if entry.get("name") == model:
                return ", ".join(str(entry[k]) for k in ("state", "reason") if entry.get(k))
        return None

    # -- tritonclient's clients ----------------------------------------------------------

    def _http(self, concurrency: int) -> Any:
        """One tritonclient.http client per thread (its connections belong to the thread's
        gevent hub), with our TLS context and headers."""
        endpoint = self.endpoint
        security = endpoint.security
        tls: dict[str, Any] = {}
        if security.tls:
            options = {"server_hostname": security.server_name} if security.server_name else {}
            tls = {
                "ssl": True,
                "ssl_options": options,
                "ssl_context_factory": lambda **_: security.ssl_context(),
            }
        control: Any = PerThreadControl(
            functools.partial(
                httpclient.InferenceServerClient,
                endpoint.url,
                concurrency=concurrency,
                connection_timeout=endpoint.timeout_s,
                network_timeout=endpoint.timeout_s,
                **tls,
            )
        )
        return WithHeaders(control, endpoint.headers) if endpoint.headers else control

    def _grpc(self) -> Any:
        endpoint = self.endpoint
        security = endpoint.security
        client: Any
        if security.tls:
            name = security.server_name
            client = grpcclient.InferenceServerClient(
                endpoint.url,
                ssl=True,
                root_certificates=security.ca_file,
                private_key=security.key_file,
                certificate_chain=security.cert_file,
                channel_args=[("grpc.ssl_target_name_override", name)] if name else None,
            )
        else:
            client = grpcclient.InferenceServerClient(endpoint.url)
        # gRPC metadata keys must be lowercase (grpc refuses 'X-Api-Key' as "Invalid
        # metadata"); HTTP header names are case-insensitive, so the same header means this
        headers = {name.lower(): value for name, value in endpoint.headers.items()}
        return WithHeaders(client, headers) if headers else client

    def release_idle(self) -> None:
        """Close tritonclient's idle connections: over HTTP every thread's client (a thread's
        next call makes a new one), over gRPC the channel, replaced by a new one."""
        if self.endpoint.protocol == "http":
            self.tritonclient.close()
        else:
            old, self.tritonclient = self.tritonclient, self._grpc()
            old.close()

    def close(self) -> None:
        self.tritonclient.close()

    # -- health and model control ---------------------------------------------------------

    def is_server_ready(self) -> bool:
        return bool(self.call("-", self.tritonclient.is_server_ready, named=False))

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return bool(
            self.call(model, lambda: self.tritonclient.is_model_ready(model, version), version)
        )

    def load_model(
        self, model: str, config: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        self.call(
            model,
            lambda: self.tritonclient.load_model(
                model, config=config, files=dict(files) if files else None
            ),
        )

    def unload_model(self, model: str) -> None:
        self.call(model, lambda: self.tritonclient.unload_model(model))

    def server_metadata(self) -> dict[str, Any]:
        if self.endpoint.protocol == "http":
            return dict(self.call("-", self.tritonclient.get_server_metadata, named=False))
        return dict(
            self.call("-", lambda: self.tritonclient.get_server_metadata(as_json=True), named=False)
        )

    def model_config(self, model: str) -> dict[str, Any]:
        got = self.call(model, lambda: self.tritonclient.get_model_config(model))
        return dict(got) if self.endpoint.protocol == "http" else _as_dict(got.config)

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        got = self.call(
            model, lambda: self.tritonclient.get_model_metadata(model, version), version
        )
        return dict(got) if self.endpoint.protocol == "http" else _as_dict(got)

    def statistics(self, model: str, version: str = "") -> dict[str, Any]:
        got = self.call(
            model, lambda: self.tritonclient.get_inference_statistics(model, version), version
        )
        return dict(_intify(got)) if self.endpoint.protocol == "http" else _as_dict(got)

    def output_names(self, model: str, version: str = "") -> list[str]:
        key = (model, version)
        if key not in self._outputs:
            meta = self.model_metadata(model, version)
            self._outputs[key] = [o["name"] for o in meta.get("outputs", [])]
        return self._outputs[key]

    def signature(self, model: str, version: str) -> tuple[list[dict[str, Any]], bool]:
        """The model's outputs (metadata) and whether it batches (config), asked once."""
        key = (model, version)
        if key not in self._signatures:
            outputs = self.model_metadata(model, version).get("outputs", [])
            batched = int(self.model_config(model).get("max_batch_size", 0) or 0) > 0
            self._signatures[key] = (list(outputs), batched)
        return self._signatures[key]
