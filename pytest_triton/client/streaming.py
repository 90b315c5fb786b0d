"""Streams from a decoupled model: one request, one response per token, then the final flag.

Over gRPC the requests go on tritonclient's bidirectional stream (`start_stream` /
`async_stream_infer`, with `enable_empty_final_response` so that the final flag arrives as a
response of its own); several requests share the stream and are told apart by their ids.
Over HTTP they go to Triton's generate-stream endpoint (`/v2/models/M/generate_stream`), which
answers with server-sent events, one per response. Each token keeps its arrival time, so the
same call measures time to first token and the gaps between tokens.

A text layout (vLLM's) streams text deltas: a response may carry the text of zero, one or
several tokens. The stream's text is their concatenation; its output tokens are the sum of
the server's per-response counts where the layout asks for them (`num_output_tokens`), else
the whole text encoded once at the end, never chunk by chunk. A response with an empty delta
is a response, not a token.

A stream that stops without its final flag ends in a StreamError once `timeout_s` passes with
no response; an error response mid-stream ends it in a StreamError with Triton's message and
the tokens that came before it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import tritonclient.grpc as grpcclient

from pytest_triton.base.errors import ConfigError, TritonTestError
from pytest_triton.base.urls import parse_url
from pytest_triton.client.stream_interface import (
    PROJECT,
    Codec,
    Prompt,
    StreamInterface,
    WireTensor,
)

PROMPT, MAX_TOKENS, STOP_TOKEN, TOKEN, POSITION = (
    t.name if t is not None else ""
    for t in (PROJECT.prompt, PROJECT.max_tokens, PROJECT.stop, PROJECT.output, PROJECT.position)
)
"""The wire names of pytest-triton's own layout, read from stream_interface.PROJECT (kept
for code that names them)."""
NO_STOP = -1
"""STOP_TOKEN value that never stops generation early."""
StreamProtocol = Literal["grpc", "http"]
FINAL = "triton_final_response"


class StreamError(TritonTestError):
    """A stream that did not end with its final flag: an error response, a timeout, a closed
    connection. Carries the tokens that came before and where it happened."""

    def __init__(self, message: str, streamed: Streamed | None = None) -> None:
        super().__init__(message)
        self.streamed = streamed


@dataclass
class Streamed:
    """One stream's tokens in order and when each arrived (perf_counter seconds). A text
    layout's stream also has its `text` (the deltas joined), `tokens` its whole text encoded
    once, `server_tokens` the server's count (None: not asked), and `arrived` one time per
    token where the server counts them, else one per response that carried text."""

    prompt: list[int] | str
    sent_at: float
    tokens: list[int] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    final_at: float | None = None
    text: str | None = None
    server_tokens: int | None = None
    responses: int = 0

    @property
    def output_tokens(self) -> int:
        """The stream's output tokens: the server's count where it gave one, else the
        tokens streamed (a text layout's: its whole text encoded once)."""
        return self.server_tokens if self.server_tokens is not None else len(self.tokens)

    @property
    def counted_by(self) -> str:
        """Where output_tokens came from."""
        if self.server_tokens is not None:
            return "the server's num_output_tokens"
        return "the whole text encoded once" if self.text is not None else "the token ids"

    def add(
        self,
        interface: StreamInterface,
        arrived: float,
        output: np.ndarray[Any, Any] | None,
        count: np.ndarray[Any, Any] | None,
    ) -> None:
        """One response's output (and the server's count of its tokens, where sent)."""
        self.responses += 1
        if not interface.text:
            tokens = interface.tokens(output) if output is not None else []
            self.tokens.extend(tokens)
            self.arrived.extend([arrived] * len(tokens))
            return
        delta = interface.delta(output) if output is not None else ""
        self.text = (self.text or "") + delta
        if count is not None:
            counted = int(count.reshape(-1).sum())
            self.server_tokens = (self.server_tokens or 0) + counted
            self.arrived.extend([arrived] * counted)
        elif delta:
            self.arrived.append(arrived)

    def finish(self, interface: StreamInterface, codec: Codec | None, at: float) -> None:
        """The final flag arrived: a text stream's tokens are its whole text, encoded once."""
        self.final_at = at
        if interface.text:
            self.text = self.text or ""
            self.tokens = interface.output_ids(self.text, codec)

    @property
    def received(self) -> str:
        """What had arrived, for a message: tokens, or a text stream's characters."""
        if self.text is not None:
            return f"{self.responses} response(s), {len(self.text)} character(s)"
        return f"{len(self.tokens)} token(s)"

    @property
    def ttft_s(self) -> float:
        """Time to first token: from sending the request to the first token's response."""
        return self.arrived[0] - self.sent_at if self.arrived else float("nan")

    @property
    def itl_s(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive tokens' responses."""
        return [b - a for a, b in zip(self.arrived, self.arrived[1:], strict=False)]

    @property
    def e2e_s(self) -> float:
        """End to end: from sending the request to its final flag."""
        end = self.final_at if self.final_at is not None else float("nan")
        return end - self.sent_at


def _inputs(
    interface: StreamInterface,
    codec: Codec | None,
    prompt: Prompt,
    max_tokens: int,
    stop_token: int,
) -> list[Any]:
    datatypes = {t.name: t.datatype for t in interface.inputs()}
    inputs = []
    for name, array in interface.request(prompt, max_tokens, stop_token, codec).items():
        tensor = grpcclient.InferInput(name, list(array.shape), datatypes[name])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


class GrpcStreams:
    """Streams to decoupled models over one gRPC bidirectional stream (tritonclient's), in
    the tensors `interface` declares (a text layout through `codec`, a tokenizer)."""

    def __init__(
        self,
        url: str,
        timeout_s: float = 30.0,
        interface: StreamInterface = PROJECT,
        codec: Codec | None = None,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.interface = interface
        self.codec = codec
        self._client = grpcclient.InferenceServerClient(url)
        self._queues: dict[str, queue.Queue[tuple[float, Any, Any]]] = {}
        self._lock = threading.Lock()
        self._ids = iter(range(1, 1 << 62))
        self._started = False

    def _callback(self, result: Any, error: Any) -> None:
        now = time.perf_counter()
        request_id = ""
        if result is not None:
            request_id = result.get_response().id
        elif error is not None:
            request_id = _error_id(error)
        with self._lock:
            targets = [self._queues[request_id]] if request_id in self._queues else []
            if not targets and error is not None:  # an error for no one in particular
                targets = list(self._queues.values())
        for q in targets:
            q.put((now, result, error))

    def _start(self) -> None:
        if not self._started:
            self._client.start_stream(callback=self._callback)
            self._started = True

    def send(
        self,
        model: str,
        prompt: Prompt,
        max_tokens: int,
        stop_token: int = NO_STOP,
        parameters: Mapping[str, Any] | None = None,
    ) -> tuple[str, Streamed]:
        """Send one request on the stream (with request `parameters`, if any); `collect`
        reads its answer."""
        self._start()
        request_id = str(next(self._ids))
        with self._lock:
            self._queues[request_id] = queue.Queue()
        streamed = Streamed(_kept(prompt), time.perf_counter())
        wanted = [t for t in (self.interface.output, self.interface.count) if t is not None]
        self._client.async_stream_infer(
            model,
            _inputs(self.interface, self.codec, prompt, max_tokens, stop_token),
            request_id=request_id,
            outputs=[grpcclient.InferRequestedOutput(t.name) for t in wanted],
            enable_empty_final_response=True,
            parameters=dict(parameters) if parameters else None,
        )
        return request_id, streamed

    def collect(self, model: str, request_id: str, streamed: Streamed) -> Streamed:
        """Read a sent request's responses until its final flag (or a StreamError)."""
        q = self._queues[request_id]
        try:
            while True:
                try:
                    arrived, result, error = q.get(timeout=self.timeout_s)
                except queue.Empty:
                    raise StreamError(
                        f"stream {request_id} of model {model!r} over gRPC stopped without its "
                        f"final flag: no response for {self.timeout_s:g}s after "
                        f"{streamed.received}",
                        streamed,
                    ) from None
                if error is not None:
                    raise StreamError(
                        f"stream {request_id} of model {model!r} over gRPC failed after "
                        f"{streamed.received}: {_message(error)}",
                        streamed,
                    )
                response = result.get_response()
                output = result.as_numpy(self.interface.output.name)
                count = self.interface.count
                counted = result.as_numpy(count.name) if count is not None else None
                if (output is not None and output.size) or counted is not None:
                    self._add(model, request_id, streamed, arrived, output, counted)
                final = response.parameters.get(FINAL)
                if final is not None and final.bool_param:
                    streamed.finish(self.interface, self.codec, arrived)
                    return streamed
        finally:
            with self._lock:
                self._queues.pop(request_id, None)

    def _add(
        self,
        model: str,
        request_id: str,
        streamed: Streamed,
        arrived: float,
        output: np.ndarray[Any, Any] | None,
        counted: np.ndarray[Any, Any] | None,
    ) -> None:
        try:
            streamed.add(self.interface, arrived, output, counted)
        except Exception as exc:
            shown = None if output is None else output.reshape(-1)[:4].tolist()
            raise StreamError(
                f"stream {request_id} of model {model!r} over gRPC: response "
                f"{streamed.responses} cannot be read as the {self.interface.layout!r} "
                f"layout's output ({self.interface.output.name} = {shown!r}): "
                f"{type(exc).__name__}: {exc}",
                streamed,
            ) from None

    def generate(
        self,
        model: str,
        prompt: Prompt,
        max_tokens: int,
        stop_token: int = NO_STOP,
        parameters: Mapping[str, Any] | None = None,
    ) -> Streamed:
        return self.collect(model, *self.send(model, prompt, max_tokens, stop_token, parameters))

    def generate_many(
        self,
        model: str,
        prompts: Sequence[Prompt],
        max_tokens: int,
        stop_token: int = NO_STOP,
        parameters: Mapping[str, Any] | None = None,
    ) -> list[Streamed]:
        """Every prompt sent at once on the stream, then each answer read."""
        sent = [self.send(model, p, max_tokens, stop_token, parameters) for p in prompts]
        return [self.collect(model, request_id, s) for request_id, s in sent]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.stop_stream(cancel_requests=True)
        with contextlib.suppress(Exception):
            self._client.close()

    def __enter__(self) -> GrpcStreams:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _kept(prompt: Prompt) -> list[int] | str:
    return prompt if isinstance(prompt, str) else list(prompt)


def _message(error: Any) -> str:
    text = error.message() if hasattr(error, "message") else str(error)
    return str(text)


def _error_id(error: Any) -> str:
    """The request id an error response names (tritonclient puts it nowhere else)."""
    text = _message(error)
    return "" if "[request id: " not in text else text.split("[request id: ")[1].split("]")[0]


def generate_http(
    url: str,
    model: str,
    prompt: Prompt,
    max_tokens: int,
    stop_token: int = NO_STOP,
    timeout_s: float = 30.0,
    parameters: Mapping[str, Any] | None = None,
    interface: StreamInterface = PROJECT,
    codec: Codec | None = None,
) -> Streamed:
    """One stream over HTTP: Triton's generate-stream endpoint, read as server-sent events
    (request `parameters`, if any, go in its `parameters` field), in `interface`'s tensors.
    The endpoint takes each input as a JSON field, a value or a flat list: a layout whose
    inputs carry a batch axis (TRTLLM) is driven over gRPC."""
    _, address = parse_url(url)
    host, _, port = address.rpartition(":")
    arrays = interface.request(prompt, max_tokens, stop_token, codec)
    fields: dict[str, Any] = {t.name: _json_value(t, arrays[t.name]) for t in interface.inputs()}
    if parameters:
        fields["parameters"] = dict(parameters)
    body = json.dumps(fields)
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    streamed = Streamed(_kept(prompt), time.perf_counter())
    where = f"model {model!r} over HTTP generate_stream"
    try:
        connection.request(
            "POST",
            f"/v2/models/{model}/generate_stream",
            body,
            {"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        response = connection.getresponse()
        if response.status != 200:
            raise StreamError(f"{where}: HTTP {response.status}: {response.read()[:500]!r}")
        for raw in response:
            arrived = time.perf_counter()
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:") :])
            if "error" in event:
                raise StreamError(
                    f"{where} failed after {streamed.received}: {event['error']}",
                    streamed,
                )
            value = event.get(interface.output.name)
            count = None if interface.count is None else event.get(interface.count.name)
            if value is not None or count is not None:
                try:
                    streamed.add(interface, arrived, _event_array(value), _event_array(count))
                except Exception as exc:
                    raise StreamError(
                        f"{where}: event {streamed.responses} cannot be read as the "
                        f"{interface.layout!r} layout's output "
                        f"({interface.output.name} = {value!r}): {type(exc).__name__}: {exc}",
                        streamed,
                    ) from None
        # The endpoint closes the event stream after the final flag, and only then.
        streamed.finish(interface, codec, time.perf_counter())
        return streamed
    except (OSError, http.client.HTTPException) as exc:
        raise StreamError(
            f"{where} stopped without its final flag after {streamed.received}: "
            f"{type(exc).__name__}: {exc}",
            streamed,
        ) from None
    finally:
        connection.close()


def _event_array(value: Any) -> np.ndarray[Any, Any] | None:
    """A generate-stream event's field as an array (a value or a list)."""
    if value is None:
        return None
    return np.asarray(value if isinstance(value, list) else [value], dtype=object)


def _json_value(tensor: WireTensor, array: np.ndarray[Any, Any]) -> Any:
    """One input as the generate endpoint's JSON field: a value where the tensor holds one,
    else a flat list."""
    values = [v.decode() if isinstance(v, bytes) else v for v in array.reshape(-1).tolist()]
    return values if -1 in tensor.shape else values[0]


def check_interface(
    url: str, model: str, interface: StreamInterface, protocol: StreamProtocol = "grpc"
) -> None:
    """Refuse, before any stream, an interface naming a tensor the served model lacks or
    declares with another datatype (read from the model's metadata), naming both."""
    if protocol == "grpc":
        with grpcclient.InferenceServerClient(url) as client:
            metadata = client.get_model_metadata(model, as_json=True)
    else:
        import tritonclient.http as httpclient

        _, address = parse_url(url)
        with httpclient.InferenceServerClient(address) as client:
            metadata = client.get_model_metadata(model)
    problems = interface.mismatches(
        {t["name"]: t["datatype"] for t in metadata.get("inputs", [])},
        {t["name"]: t["datatype"] for t in metadata.get("outputs", [])},
    )
    if problems:
        raise ConfigError(
            f"model {model!r} does not speak the {interface.layout!r} stream layout: "
            + "; ".join(problems)
            + " (give the interface the model's names, e.g. interface.renamed(...); a vLLM "
            "backend without num_output_tokens: VLLM.uncounted())"
        )
