"""A model built from a `transformers` config (GPT-2, random weights, nothing downloaded) as a
user's generator: traced, served by the generic decoupled model.py on the real bundled
tritonserver, and checked token by token over gRPC and HTTP generate_stream (`-m slow`: it
costs ~17 CPU-seconds). The refusal of a trace that fixes the prompt's length is in
tests/repository/test_stream_spec.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pytest_triton.client.streaming import GrpcStreams, generate_http
from pytest_triton.models.transformers_lm import gpt2_spec
from pytest_triton.parity.token_match import assert_stream_parity
from pytest_triton.repository.stream import generate, write_stream_model
from pytest_triton.server import LocalLauncher, ServerArgs

MAX_TOKENS = 10
pytestmark = pytest.mark.skipif(  # looked up, not imported: collection stays cheap
    importlib.util.find_spec("transformers") is None, reason="the transformers extra"
)


@pytest.mark.slow  # importing transformers and its served model: ~17 CPU-seconds here
def test_a_transformers_gpt2_streams_its_greedy_tokens(tmp_path: Path) -> None:
    spec = gpt2_spec()
    module = spec.module()
    prompts = spec.prompts(3, length=5)
    wanted = [generate(module, p, MAX_TOKENS, vocab=spec.vocab) for p in prompts]
    assert len({tuple(w) for w in wanted}) > 1  # the prompt matters: not one fixed answer
    write_stream_model(tmp_path, spec)
    with LocalLauncher().start(ServerArgs(tmp_path, model_control_mode="none")) as server:
        with GrpcStreams(server.endpoints.grpc, timeout_s=30) as streams:
            together = streams.generate_many(spec.name, prompts, MAX_TOKENS)
        for i, streamed in enumerate(together):
            assert_stream_parity(streamed.tokens, wanted[i], context=f"prompt {i}")
        over_http = generate_http(server.endpoints.http, spec.name, prompts[1], MAX_TOKENS)
        assert_stream_parity(over_http.tokens, wanted[1], context="HTTP")
