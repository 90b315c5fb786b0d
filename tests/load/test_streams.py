"""Streams on the real bundled tritonserver (one per module, shared by every test here):
a decoupled generator's streamed tokens against PyTorch's greedy generation, over gRPC
streaming and HTTP generate_stream; the ways a stream goes wrong (a wrong token, an error
mid-stream, no final flag, a prompt longer than the context, a client killed mid-stream), each
a clear error while the server serves on; and streams under Locust load (given as --host):
TTFT / ITL targets that pass, an impossible TTFT target that fails naming it, and a token
corrupted at a fixed position under concurrency failing the answer check."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from torch import nn

from pytest_triton.base.errors import SpecError
from pytest_triton.client.streaming import GrpcStreams, StreamError, generate_http
from pytest_triton.models.tiny_generator import stream_spec
from pytest_triton.parity.token_match import assert_stream_parity
from pytest_triton.repository.stream import generate, write_stream_model
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import Endpoints
from tests.helpers.locust_runs import LOCUSTFILES, REPO, run_locust, subprocess_env
from tests.helpers.stream_models import CORRUPT_AT, ERROR_AT, SLOW_TOKEN_S, write_faulty

SPEC = stream_spec(instances=1)  # one stub a model: 8 streams at once still queue on it
FAULTY = f"{SPEC.name}_faulty"
MAX_TOKENS = 16
FAULTY_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "streams_faulty.py"
SHORT = ("--headless", "-t", "4s", "--triton-load-warmup", "1000", "--triton-check-every", "1")
PROMPTS = SPEC.prompts(8)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    root: Path = tmp_path_factory.mktemp("streams")
    write_stream_model(root, SPEC)
    write_faulty(root, SPEC)
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as server:
        yield server.endpoints


@pytest.fixture(scope="module")
def module() -> nn.Module:
    return SPEC.module()


def expected(module: nn.Module, prompt: list[int], max_tokens: int = MAX_TOKENS) -> list[int]:
    return generate(module, prompt, max_tokens)


def test_reference_tells_prompts_apart(module: nn.Module) -> None:
    """A parity that a model ignoring its prompt would pass proves nothing."""
    answers = {tuple(expected(module, p)) for p in PROMPTS}
    assert len(answers) == len(PROMPTS)


def test_grpc_streams_equal_greedy_generation(served: Endpoints, module: nn.Module) -> None:
    with GrpcStreams(served.grpc, timeout_s=30) as streams:
        together = streams.generate_many(SPEC.name, PROMPTS, MAX_TOKENS)
        alone = [streams.generate(SPEC.name, p, MAX_TOKENS) for p in PROMPTS[:2]]
    for i, streamed in enumerate(together):
        assert streamed.final_at is not None
        assert len(streamed.arrived) == MAX_TOKENS
        assert_stream_parity(streamed.tokens, expected(module, PROMPTS[i]), context=f"prompt {i}")
    assert [s.tokens for s in alone] == [s.tokens for s in together[:2]]


def test_http_generate_stream_equals_greedy_generation(
    served: Endpoints, module: nn.Module
) -> None:
    for i, prompt in enumerate(PROMPTS):
        streamed = generate_http(served.http, SPEC.name, prompt, MAX_TOKENS)
        assert_stream_parity(streamed.tokens, expected(module, prompt), context=f"prompt {i}")


def test_stop_token_ends_the_stream(served: Endpoints, module: nn.Module) -> None:
    full = expected(module, PROMPTS[0])
    stop = full[4]
    want = full[: full.index(stop) + 1]
    with GrpcStreams(served.grpc) as streams:
        streamed = streams.generate(SPEC.name, PROMPTS[0], MAX_TOKENS, stop_token=stop)
    assert streamed.tokens == want == generate(module, PROMPTS[0], MAX_TOKENS, stop)


def test_a_corrupted_token_under_concurrency_is_named(served: Endpoints, module: nn.Module) -> None:
    with GrpcStreams(served.grpc) as streams:
        answers = streams.generate_many(
            FAULTY, PROMPTS, MAX_TOKENS, parameters={"fault": "corrupt"}
        )
    for i, streamed in enumerate(answers):
        want = expected(module, PROMPTS[i])
        with pytest.raises(AssertionError) as caught:
            assert_stream_parity(streamed.tokens, want, context=f"prompt {i}")
        served_token = (want[CORRUPT_AT] + 1) % SPEC.vocab
        assert (
            f"prompt {i}: streamed tokens differ from PyTorch's greedy generation first at "
            f"position {CORRUPT_AT}: served {served_token}, expected {want[CORRUPT_AT]}"
        ) in str(caught.value)


def test_an_error_mid_stream_names_it_and_the_server_serves_on(
    served: Endpoints, module: nn.Module
) -> None:
    with GrpcStreams(served.grpc) as streams:
        with pytest.raises(StreamError, match=f"failed after {ERROR_AT} token") as caught:
            streams.generate(FAULTY, PROMPTS[0], MAX_TOKENS, parameters={"fault": "error"})
        assert "injected failure at token 3" in str(caught.value)
        assert caught.value.streamed is not None
        assert caught.value.streamed.tokens == expected(module, PROMPTS[0])[:ERROR_AT]
        assert streams.generate(SPEC.name, PROMPTS[1], 4).tokens == expected(module, PROMPTS[1], 4)
    with pytest.raises(StreamError, match="injected failure at token 3"):
        generate_http(served.http, FAULTY, PROMPTS[0], MAX_TOKENS, parameters={"fault": "error"})


def test_a_stream_without_its_final_flag_times_out_clearly(served: Endpoints) -> None:
    with GrpcStreams(served.grpc, timeout_s=1.0) as streams:
        with pytest.raises(StreamError) as caught:
            streams.generate(FAULTY, PROMPTS[0], 4, parameters={"fault": "no_final"})
        assert "stopped without its final flag: no response for 1s after 4 token(s)" in str(
            caught.value
        )
        assert streams.generate(SPEC.name, PROMPTS[0], 2).final_at is not None


def test_a_prompt_longer_than_the_context_is_refused(served: Endpoints, module: nn.Module) -> None:
    long_prompt = [1] * (64 + 6)
    words = f"the prompt has {len(long_prompt)} tokens, longer than the model's context of 64"
    with pytest.raises(SpecError, match=words):
        generate(module, long_prompt, 4)
    with GrpcStreams(served.grpc) as streams:
        with pytest.raises(StreamError, match=words):
            streams.generate(SPEC.name, long_prompt, 4)
        with pytest.raises(StreamError, match="ask for at most 59 new tokens"):
            streams.generate(SPEC.name, PROMPTS[0], 60)
        assert streams.generate(SPEC.name, PROMPTS[2], 3).tokens == expected(module, PROMPTS[2], 3)


# The child speaks tritonclient directly (a lighter import than the package's): one stream,
# then it waits to be killed after its first token.
KILLED_CLIENT = """
import queue, sys, time
import numpy as np
import tritonclient.grpc as g
first = queue.Queue()
client = g.InferenceServerClient(sys.argv[1])
client.start_stream(callback=lambda result, error: first.put(error))
inputs = [g.InferInput("PROMPT", [3], "INT64"), g.InferInput("MAX_TOKENS", [1], "INT32")]
inputs[0].set_data_from_numpy(np.array([1, 2, 3], np.int64))
inputs[1].set_data_from_numpy(np.array([50], np.int32))
client.async_stream_infer(sys.argv[2], inputs, parameters={"fault": "slow"})
assert first.get(timeout=60) is None
print("first token", flush=True)
time.sleep(60)
"""


def test_a_client_killed_mid_stream_leaves_the_server_serving(
    served: Endpoints, module: nn.Module
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, served.grpc, FAULTY],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "first token"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    with GrpcStreams(served.grpc) as streams:
        streamed = streams.generate(
            FAULTY, PROMPTS[3], 3, parameters={"fault": "slow"}
        )  # the same instance
        assert streamed.tokens == expected(module, PROMPTS[3], 3)
        # The killed stream was cancelled: left running it would hold the instance for
        # about 50 x SLOW_TOKEN_S more before this stream's first token.
        assert streamed.ttft_s < 25 * SLOW_TOKEN_S, "the killed client's stream went on"
        assert streams.generate(SPEC.name, PROMPTS[3], MAX_TOKENS).tokens == expected(
            module, PROMPTS[3]
        )


def test_streaming_load_meets_ttft_and_itl_targets(served: Endpoints, tmp_path: Path) -> None:
    done = run_locust(
        LOCUSTFILES / "streams.py",
        *SHORT,
        "-u", "2", "-r", "2",
        "--host", f"grpc://{served.grpc}",
        "--perf-ttft-p99", "5000",
        "--perf-itl-p99", "5000",
        "--perf-output-tokens-per-s", "1",
        "--perf-stream-goodput", "0.5",
        "--perf-slo-ttft-ms", "5000",
        "--perf-slo-itl-ms", "5000",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert done.code == 0, done.tail()
    assert done.report is not None
    rows = {c["name"]: c for c in done.report["checks"]}
    for name in (
        "perf_ttft_p99",
        "perf_itl_p99",
        "perf_output_tokens_per_s",
        "perf_stream_goodput",
        "wrong_answers",
    ):
        assert rows[name]["passed"] is True, rows[name]
    streams = done.report["streams"]
    assert streams["streams"] > 0 and streams["output_tokens"] == 16 * streams["streams"]
    assert 0 < streams["ttft_p99_ms"] <= streams["e2e_p99_ms"]
    assert "time to first token (ms): p50" in done.output


def test_impossible_ttft_and_a_corrupted_token_fail_naming_them(
    served: Endpoints, tmp_path: Path
) -> None:
    done = run_locust(
        FAULTY_LOCUSTFILE,
        *SHORT,
        "-u", "4", "-r", "4",
        "--host", f"http://{served.http}",
        "--triton-grpc-url", f"grpc://{served.grpc}",
        "--perf-ttft-p99", "0.001",
        "--perf-stream-goodput", "0.99",
        "--perf-slo-ttft-ms", "0.001",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert done.code == 1, done.tail()
    result = next(line for line in done.stdout.splitlines() if line.startswith("RESULT:"))
    assert re.search(r"perf_ttft_p99 \(ms\) measured [\d.,]+, target <= 0.001", result), result
    module = SPEC.module()
    wrong = {
        f"first at position {CORRUPT_AT}: served {(want[CORRUPT_AT] + 1) % SPEC.vocab}, "
        f"expected {want[CORRUPT_AT]}"
        for want in (generate(module, p, 16) for p in SPEC.prompts(8))
    }
    assert any(text in done.output for text in wrong), done.tail()
    assert done.report is not None
    assert done.report["wrong_answers"] > 0
    # every wrong stream was found by a check (--triton-check-every 1): the whole run's counts
    run = done.report["streams"]["run"]
    assert run["mismatched_streams"] == done.report["wrong_answers"], run
    assert run["checked_streams"] == run["mismatched_streams"] + run["streams"] > 0, run
    rows = {c["name"]: c for c in done.report["checks"]}
    assert rows["wrong_answers"]["passed"] is False
    assert rows["perf_stream_goodput"]["passed"] is False
    assert rows["perf_stream_goodput"]["measured"] == 0.0  # no stream within 1 us, none wrong
    # the good model's streams (HTTP generate_stream) were right: every wrong answer is the
    # faulty model's, named after it
    assert f"model '{SPEC.name}_faulty'" in done.output
