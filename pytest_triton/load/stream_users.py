"""Locust users for decoupled (token-streaming) models.

A StreamUser sends one prompt after another (a closed loop; with --triton-request-rate, its
share of an open loop, at most --triton-max-in-flight streams in flight) and reads every
token's response: over gRPC on tritonclient's bidirectional stream, or over HTTP through
Triton's generate-stream endpoint. Each stream is one Locust request event named after the
model: its response time is the stream's end-to-end latency (to the final flag), its
`response_length` the tokens it carried, and `context["stream"]` its timings, which
stream_recording.py logs as time to first token, inter-token latencies and output tokens
(the verdict's --perf-ttft-p99, --perf-itl-p99 and --perf-output-tokens-per-s). One stream
in N (--triton-check-every; 100 on the server a locustfile starts itself) is compared with
PyTorch's greedy generation: token by token in an id layout, as text in a text layout (vLLM's:
the reference's ids decoded in the prompt's context); a wrong one fails its request naming
the first position. A text stream's output tokens are the server's num_output_tokens where
the layout asks for them, else its whole text encoded once; a right text whose server count
differs from the reference's is logged as a count difference, not failed.

Importing this module imports locust (gevent monkey patching), like users.py.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import locust
import torch
from locust import task
from tritonclient.utils import InferenceServerException

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.client.stream_interface import PROJECT, Codec, Prompt, StreamInterface
from pytest_triton.client.streaming import (
    NO_STOP,
    GrpcStreams,
    Streamed,
    StreamError,
    StreamProtocol,
    check_interface,
    generate_http,
)
from pytest_triton.load.runner import grpc_gevent, listeners, stream_recording
from pytest_triton.load.runner.checking import answers_every
from pytest_triton.load.runner.embedded import EmbeddedStream
from pytest_triton.load.runner.open_loop import OpenLoop, ReplayLoop, open_loop
from pytest_triton.load.runner.user_settings import user_endpoint, user_model
from pytest_triton.load.runner.user_start import StartingUser
from pytest_triton.load.webui import events
from pytest_triton.models import tiny_generator
from pytest_triton.parity.text_match import TextReference, count_difference, wrong_text
from pytest_triton.parity.token_match import wrong_stream
from pytest_triton.repository.stream import StreamSpec, generate

grpc_gevent.init()
listeners.install_listeners(locust.events)
events.install_web_listeners(locust.events)  # after the run's own: they read what it made
torch.set_num_threads(1)

Reference = Callable[[Sequence[int], int, int], list[int]]
LOG = logging.getLogger(__name__)

__all__ = ["EmbeddedStream", "StreamSpec", "StreamUser", "stream_model"]


def stream_model(spec: StreamSpec | None = None) -> EmbeddedStream:
    """The generator a stream locustfile serves itself without --host (default: the zoo's
    tiny_generator.stream_spec())."""
    return EmbeddedStream(spec or tiny_generator.stream_spec())


class StreamUser(StartingUser):
    """Streams prompts to one decoupled model and measures every token.

    Class attributes: `model` (default: `served`'s name), `served` (the EmbeddedStream
    started when no --host is given), `protocol` ("grpc" or "http"), `prompts` (default: 16
    of `served`'s), `max_tokens`, `stop_token`, `reference` (prompt, max_tokens, stop_token
    -> the tokens a right stream carries; default: `served`'s greedy generation), `parameters`
    (Triton request parameters sent with every prompt), `interface` (the tensors the model
    speaks, client/stream_interface.py; default: `served`'s, else pytest-triton's own) and
    `codec` (a text layout's tokenizer; default: `served`'s). The interface is checked against
    the served model's metadata before the first stream.
    """

    abstract = True
    _user_kind = "stream"
    _served_kind = "stream model"
    model: str | None = None
    served: EmbeddedStream | None = None
    protocol: StreamProtocol = "grpc"
    prompts: Sequence[Prompt] | None = None
    add_special_tokens: bool | None = None
    max_tokens: int = 16
    stop_token: int = NO_STOP
    parameters: ClassVar[Mapping[str, Any] | None] = None  # Triton request parameters
    reference: ClassVar[Reference | None] = None
    interface: ClassVar[StreamInterface | None] = None
    codec: ClassVar[Codec | None] = None
    timeout_s: float = 30.0

    _open_loop: OpenLoop | ReplayLoop | None = None

    def set_up(self, host: str, config: TritonConfig, number: int) -> None:
        cls = type(self)
        stream_recording.listen_for_streams(self.environment)
        self._model = user_model(cls, config)
        self._url = user_endpoint(cls.protocol, host, config)
        prompts = cls.prompts or (cls.served.spec.prompts(16) if cls.served else None)
        if not prompts:
            raise ConfigError(f"{cls.__name__} has no `prompts` and no `served` model")
        offset = number % len(prompts)
        self._prompts = itertools.cycle([*prompts[offset:], *prompts[:offset]])
        self._every = answers_every(config, host)
        self._reference = self._reference_of(cls) if self._every else None
        if self._every and self._reference is None:
            raise ConfigError(
                f"{cls.__name__} checks one stream in {self._every} but has no "
                "`reference` and no `served` model: set one, or --triton-check-every 0"
            )
        self._sent = 0
        self._slo_ttft_s = (config.gate.perf_slo_ttft_ms or math.inf) / 1e3
        self._slo_itl_s = (config.gate.perf_slo_itl_ms or math.inf) / 1e3
        self._open_loop = open_loop(self.environment, config, number)
        self._interface, self._codec = self._layout_of(cls)
        self._special = self._special_of(cls)
        with contextlib.suppress(InferenceServerException):  # unreachable: streams say
            check_interface(self._url, self._model, self._interface, cls.protocol)
        self._grpc = (
            GrpcStreams(self._url, self.timeout_s, self._interface, self._codec)
            if cls.protocol == "grpc"
            else None
        )
        self._request_type = "gRPC-stream" if cls.protocol == "grpc" else "HTTP-stream"

    @staticmethod
    def _layout_of(cls: type[StreamUser]) -> tuple[StreamInterface, Codec | None]:
        spec = cls.served.spec if cls.served is not None else None
        interface = cls.interface or (spec.interface if spec is not None else PROJECT)
        codec = cls.codec or (spec.tokenizer if spec is not None else None)
        if interface.text and codec is None:
            raise ConfigError(
                f"{cls.__name__} speaks the text layout {interface.layout!r}: set `codec` to "
                "the model's tokenizer (a tokenizers.Tokenizer)"
            )
        return interface, codec

    @staticmethod
    def _special_of(cls: type[StreamUser]) -> bool:
        if cls.add_special_tokens is not None:
            return cls.add_special_tokens
        return cls.served.spec.add_special_tokens if cls.served is not None else True

    @staticmethod
    def _reference_of(cls: type[StreamUser]) -> Reference | None:
        if cls.reference is not None:
            return cls.reference
        if cls.served is None:
            return None
        module, spec = cls.served.reference(), cls.served.spec
        return lambda prompt, max_tokens, stop: generate(
            module, prompt, max_tokens, stop, vocab=spec.vocab, context=spec.context
        )

    @task
    def stream(self) -> None:
        if self._open_loop is not None:
            self._open_loop.run(self._send)  # until the user is stopped
        else:
            self._send(time.perf_counter())

    def _send(self, due: float, _batch_size: int | None = None) -> None:
        """One stream; its latencies count from `due` (now in a closed loop, its scheduled
        time in an open one)."""
        given = next(self._prompts)
        prompt: Prompt = given if isinstance(given, str) else list(given)
        self._sent += 1
        checked = bool(self._every) and self._sent % self._every == 1 % self._every
        error: Exception | None = None
        streamed: Streamed | None = None
        try:
            if self._grpc is not None:
                streamed = self._grpc.generate(
                    self._model, prompt, self.max_tokens, self.stop_token, self.parameters
                )
            else:
                streamed = generate_http(
                    self._url,
                    self._model,
                    prompt,
                    self.max_tokens,
                    self.stop_token,
                    self.timeout_s,
                    self.parameters,
                    self._interface,
                    self._codec,
                )
        except StreamError as exc:
            error, streamed = exc, exc.streamed
        except Exception as exc:  # every client/server failure is a failed stream, not a crash
            error = exc
        context: dict[str, Any] = {"batch_size": 1, "protocol": self.protocol, "checked": checked}
        ended = time.perf_counter()
        if streamed is not None:
            streamed.sent_at = min(streamed.sent_at, due)
        if error is None and streamed is not None and checked and self._reference is not None:
            error = self._check(prompt, streamed)
            context["stream_checked"] = True
            context["stream_mismatched"] = error is not None
        if error is None and streamed is not None:
            context["stream"] = (
                time.time(),
                streamed.ttft_s,
                streamed.itl_s,
                streamed.e2e_s,
                streamed.output_tokens,
                self._good(streamed),
            )
            ended = streamed.final_at or ended
        else:
            context["stream_failed"] = time.time()
        self.environment.events.request.fire(
            request_type=self._request_type,
            name=self._model,
            response_time=(ended - due) * 1e3,
            response_length=streamed.output_tokens if streamed is not None else 0,
            exception=error,
            context=context,
        )

    def _check(self, prompt: Prompt, streamed: Streamed) -> Exception | None:
        """The wrong answer a checked stream gave (None: right): its ids against the
        reference's, or, in a text layout, its text against the reference's ids decoded in
        the prompt's context (a right text with another server count is logged, not failed)."""
        assert self._reference is not None
        where = f"model {self._model!r}, prompt {prompt!r}"
        if not self._interface.text:
            assert not isinstance(prompt, str)  # refused when the request was built
            want = self._reference(prompt, self.max_tokens, self.stop_token)
            return wrong_stream(streamed.tokens, want, context=where)
        prompt_ids = self._interface.prompt_ids(prompt, self._codec, self._special)
        ids = self._reference(prompt_ids, self.max_tokens, self.stop_token)
        assert self._codec is not None  # refused at set-up
        reference = TextReference.of(self._codec, prompt_ids, ids, self.stop_token)
        wrong = wrong_text(streamed.text or "", reference, context=where)
        counted = count_difference(streamed.server_tokens, reference, context=where)
        if wrong is None and counted is not None:
            LOG.warning(counted)
        return wrong

    def _good(self, streamed: Streamed) -> bool:
        """Within the SLOs: TTFT, and the stream's average gap (AIPerf's per-request ITL)."""
        gaps = streamed.output_tokens - 1
        itl = (streamed.e2e_s - streamed.ttft_s) / gaps if gaps > 0 else 0.0
        return streamed.ttft_s <= self._slo_ttft_s and itl <= self._slo_itl_s

    def on_stop(self) -> None:
        if self._open_loop is not None:
            self._open_loop.stop()
        grpc = getattr(self, "_grpc", None)
        if grpc is not None:
            with contextlib.suppress(Exception):
                grpc.close()
