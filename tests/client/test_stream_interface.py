"""Stream interfaces: the tensors of a decoupled generator declared once and read by the
client, the served layout model and the parity check. Each preset is proven on the real
bundled tritonserver (one for the module) against a python-backend model that speaks exactly
that layout: the vLLM backend's (text in and out, through a WordLevel tokenizer built here
with `tokenizers`) and the TensorRT-LLM backend's (token ids with batch and beam axes), each
streamed answer checked against PyTorch's greedy generation, over the client, StreamUser
(Locust) and triton-perf; a faulty model of each layout fails naming the stream and the
position."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_triton.base.errors import ConfigError, SpecError
from pytest_triton.client.stream_interface import PROJECT, TRTLLM, VLLM, StreamInterface
from pytest_triton.client.streaming import (
    GrpcStreams,
    StreamError,
    check_interface,
    generate_http,
)
from pytest_triton.parity.text_match import TextReference, assert_text_parity
from pytest_triton.parity.token_match import assert_stream_parity
from pytest_triton.repository.stream import (
    StreamSpec,
    expected_text,
    generate,
    write_stream_model,
)
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import Endpoints
from tests.helpers.locust_runs import REPO, Locust, run_locust, triton_perf_args
from tests.helpers.stream_models import (
    CORRUPT_AT,
    LAYOUT_BASE,
    LAYOUT_SPECS,
    LAYOUT_VOCAB,
    write_faulty,
)

VOCAB = LAYOUT_VOCAB
MAX_TOKENS = 10
SPECS = LAYOUT_SPECS
BASE = LAYOUT_BASE
TOKENIZER = SPECS["vllm"].tokenizer
PROMPTS = BASE.prompts(4, length=5)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    root: Path = tmp_path_factory.mktemp("layouts")
    for spec in SPECS.values():
        write_stream_model(root, spec)
        write_faulty(root, spec)
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as server:
        yield server.endpoints


def expected(prompt: list[int], stop: int = -1) -> list[int]:
    return generate(BASE.module(), prompt, MAX_TOKENS, stop, vocab=VOCAB)


def expected_text_of(prompt: list[int], stop: int = -1) -> TextReference:
    spec = SPECS["vllm"]
    return expected_text(spec, BASE.module(), prompt, MAX_TOKENS, stop)


# -- the interface, no server ----------------------------------------------------------------
def test_each_preset_builds_its_layouts_request() -> None:
    trt = TRTLLM.request([3, 4, 5], 8, 2)
    assert {k: (v.dtype.name, v.shape) for k, v in trt.items()} == {
        "input_ids": ("int32", (1, 3)),
        "input_lengths": ("int32", (1, 1)),
        "request_output_len": ("int32", (1, 1)),
        "end_id": ("int32", (1, 1)),
        "streaming": ("bool", (1, 1)),
    }
    vllm = VLLM.request([3, 4, 5], 8, 2, TOKENIZER)
    assert vllm["text_input"].tolist() == [b"w3 w4 w5"]
    assert VLLM.request("w3 w4", 8, 2)["text_input"].tolist() == [b"w3 w4"]  # text as is
    assert vllm["stream"].tolist() == [True]
    assert vllm["exclude_input_in_output"].tolist() == [True]
    assert vllm["return_num_output_tokens"].tolist() == [True]
    assert "return_num_output_tokens" not in VLLM.uncounted().request([3], 8, 2, TOKENIZER)
    assert json.loads(vllm["sampling_parameters"][0]) == {
        "temperature": 0.0,
        "max_tokens": 8,
        "stop_token_ids": [2],
    }
    assert PROJECT.request([3], 8, -1)["PROMPT"].dtype == np.int64
    assert VLLM.delta(np.array([" grüße".encode()], dtype=object)) == " grüße"
    assert VLLM.output_ids(" w7 w8", TOKENIZER) == [7, 8]
    assert VLLM.prompt_ids([3, 4], TOKENIZER) == [3, 4] == TRTLLM.prompt_ids([3, 4], None)
    with pytest.raises(ConfigError, match="speaks text: give a tokenizer"):
        VLLM.request([1], 2, -1)
    with pytest.raises(ConfigError, match="takes token ids: give the prompt as ids"):
        TRTLLM.request("w1 w2", 2, -1)


def test_an_interface_naming_what_the_model_lacks_is_told_apart() -> None:
    served_inputs = {"text_input": "BYTES", "stream": "BOOL", "sampling_parameters": "INT32"}
    flags = {"exclude_input_in_output": "BOOL", "return_num_output_tokens": "BOOL"}
    served_outputs = {"text": "BYTES", "num_output_tokens": "UINT32"}
    assert VLLM.mismatches(served_inputs | flags, served_outputs) == [
        "the 'vllm' layout's input 'sampling_parameters' is BYTES; the model's is INT32",
        "the 'vllm' layout's output 'text_output' (BYTES) is not among the model's outputs: "
        "{'text': 'BYTES', 'num_output_tokens': 'UINT32'}",
    ]
    # a backend without the counts: the uncounted layout asks for none
    assert VLLM.uncounted().mismatches(served_inputs, {"text_output": "BYTES"}) == [
        "the 'vllm' layout's input 'sampling_parameters' is BYTES; the model's is INT32",
        "the 'vllm' layout's input 'exclude_input_in_output' (BOOL) is not among the model's "
        "inputs: {'text_input': 'BYTES', 'stream': 'BOOL', 'sampling_parameters': 'INT32'}",
    ]
    with pytest.raises(ConfigError, match="declares no token budget"):
        StreamInterface("bare", VLLM.prompt, VLLM.output)
    with pytest.raises(SpecError, match="give tokenizer="):
        StreamSpec("text", BASE.generator, VOCAB, interface=VLLM)


# -- served on the real tritonserver ---------------------------------------------------------
def test_a_vllm_layout_model_streams_the_greedy_tokens_as_text(served: Endpoints) -> None:
    with GrpcStreams(served.grpc, interface=VLLM, codec=TOKENIZER) as streams:
        together = streams.generate_many("vllm_lm", PROMPTS, MAX_TOKENS)
        stop = expected(PROMPTS[1])[3]
        stopped = streams.generate("vllm_lm", PROMPTS[1], MAX_TOKENS, stop)
    for i, streamed in enumerate(together):
        want = expected_text_of(PROMPTS[i])
        assert_text_parity(streamed.text or "", want, context=f"prompt {i}")
        # WordLevel ids survive decode -> encode: the whole text re-encoded is the ids
        assert streamed.tokens == expected(PROMPTS[i]) == list(want.ids)
        assert streamed.server_tokens == MAX_TOKENS
    # the stop token counts, its text is not streamed (vLLM's rule)
    assert stopped.tokens == expected(PROMPTS[1], stop)[:-1]
    assert stopped.server_tokens == len(expected(PROMPTS[1], stop))
    over_http = generate_http(
        served.http, "vllm_lm", PROMPTS[2], MAX_TOKENS, interface=VLLM, codec=TOKENIZER
    )
    assert_text_parity(over_http.text or "", expected_text_of(PROMPTS[2]), context="HTTP")


def test_a_tensorrt_llm_layout_model_streams_the_greedy_ids(served: Endpoints) -> None:
    with GrpcStreams(served.grpc, interface=TRTLLM) as streams:
        together = streams.generate_many("trtllm_lm", PROMPTS, MAX_TOKENS)
        stop = expected(PROMPTS[0])[2]
        stopped = streams.generate("trtllm_lm", PROMPTS[0], MAX_TOKENS, stop)
    for i, streamed in enumerate(together):
        assert_stream_parity(streamed.tokens, expected(PROMPTS[i]), context=f"prompt {i}")
    assert stopped.tokens == expected(PROMPTS[0], stop)


@pytest.mark.parametrize("layout", sorted(SPECS))
def test_a_faulty_model_of_each_layout_fails_naming_the_stream_and_position(
    served: Endpoints, layout: str
) -> None:
    spec = SPECS[layout]
    with GrpcStreams(served.grpc, interface=spec.interface, codec=spec.tokenizer) as streams:
        streamed = streams.generate(
            f"{spec.name}_faulty", PROMPTS[3], MAX_TOKENS, parameters={"fault": "corrupt"}
        )
    want = expected(PROMPTS[3])
    with pytest.raises(AssertionError) as caught:
        if spec.interface.text:
            text = expected_text_of(PROMPTS[3])
            assert_text_parity(streamed.text or "", text, context=f"{layout} prompt 3")
        assert_stream_parity(streamed.tokens, want, context=f"{layout} prompt 3")
    if spec.interface.text:  # the corrupt token's text is where the texts part
        assert re.search(
            rf"{layout} prompt 3: streamed text differs from PyTorch's greedy generation first "
            rf"at character \d+, in token position {CORRUPT_AT}: served '\d', expected '\d'",
            str(caught.value),
        ), str(caught.value)
        return
    assert (
        f"{layout} prompt 3: streamed tokens differ from PyTorch's greedy generation first at "
        f"position {CORRUPT_AT}: served {(want[CORRUPT_AT] + 1) % VOCAB}, expected "
        f"{want[CORRUPT_AT]}"
    ) in str(caught.value)


def test_a_rejected_sampling_parameter_names_the_stream_and_the_server_serves_on(
    served: Endpoints,
) -> None:
    """A client that puts the stop token under another key ("stop") than the model takes."""
    other = dataclasses.replace(VLLM, sampling_keys=("max_tokens", "stop"))
    with (
        GrpcStreams(served.grpc, interface=other, codec=TOKENIZER) as streams,
        pytest.raises(StreamError) as caught,
    ):
        streams.generate("vllm_lm", PROMPTS[0], 4, stop_token=3)
    assert re.search(
        r"stream \d+ of model 'vllm_lm' over gRPC failed after 0 token", str(caught.value)
    )
    assert "sampling parameter(s) ['stop'] not supported: this model takes" in str(caught.value)
    with GrpcStreams(served.grpc, interface=VLLM, codec=TOKENIZER) as streams:
        assert streams.generate("vllm_lm", PROMPTS[0], 4).tokens == expected(PROMPTS[0])[:4]
        # WordLevel's ids survive decode -> encode, so the whole text re-encoded is the ids


def test_an_interface_the_served_model_does_not_speak_is_refused_before_streaming(
    served: Endpoints,
) -> None:
    check_interface(served.grpc, "trtllm_lm", TRTLLM)
    check_interface(served.http, "vllm_lm", VLLM, "http")
    with pytest.raises(ConfigError) as caught:
        check_interface(served.grpc, "vllm_lm", VLLM.renamed(prompt="prompt_text"))
    assert (
        "model 'vllm_lm' does not speak the 'vllm' stream layout: the 'vllm' layout's input "
        "'prompt_text' (BYTES) is not among the model's inputs: {'text_input': 'BYTES'"
    ) in str(caught.value)
    with pytest.raises(ConfigError, match="input 'stream' is BYTES; the model's is BOOL"):
        check_interface(served.grpc, "vllm_lm", VLLM.renamed(prompt="stream"))


LAYOUTS_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "streams_layouts.py"


def test_stream_users_drive_both_layouts_and_every_answer_is_checked(
    served: Endpoints, tmp_path: Path
) -> None:
    """StreamUser reads the layout from its spec: TensorRT-LLM's over gRPC all right, vLLM's
    over HTTP generate_stream from the faulty model, every stream checked."""
    done = run_locust(
        LAYOUTS_LOCUSTFILE,
        "--headless", "-t", "4s", "-u", "2", "-r", "2",
        "--triton-load-warmup", "1000", "--triton-check-every", "1",
        "--host", f"http://{served.http}",
        "--triton-grpc-url", f"grpc://{served.grpc}",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert done.code == 1, done.tail()
    right = re.search(r"gRPC-stream +trtllm_lm +(\d+) +0\(0\.00%\)", done.output)
    wrong = re.search(r"HTTP-stream +vllm_lm_faulty +(\d+) +(\d+)\(100\.00%\)", done.output)
    assert right and int(right[1]) > 0, done.tail()
    assert wrong and wrong[1] == wrong[2] != "0", done.tail()
    assert_counted_once(done.output, done.report)
    assert re.search(
        r"wrong answer: model 'vllm_lm_faulty', prompt \[[\d, ]+\]: streamed text differs "
        rf"from PyTorch's greedy generation first at character \d+, in token position "
        rf"{CORRUPT_AT}: served",
        done.output,
    ), done.tail()


WHOLE_RUN = re.compile(
    r"whole run \(warm-up included\): (\d+) streams ended = (\d+) complete \+ (\d+) failed; "
    r"(\d+) checked token by token = (\d+) agreed \+ (\d+) mismatched"
)


def assert_counted_once(output: str, report: dict[str, Any] | None) -> None:
    """The printed whole-run line counts each stream once and adds up: ended = complete +
    failed, checked = agreed + mismatched (every stream checked here: checked = ended); it
    says what the JSON report's counts and Locust's own last table say."""
    counts = WHOLE_RUN.search(output)
    assert counts is not None and report is not None, output[-3000:]
    ended, complete, failed, checked, agreed, mismatched = map(int, counts.groups())
    assert ended == complete + failed and checked == agreed + mismatched, counts[0]
    assert checked == ended and agreed == complete and mismatched == failed > 0, counts[0]
    run = report["streams"]["run"]
    assert (run["streams"], run["failed_streams"]) == (complete, failed), (run, counts[0])
    assert (run["checked_streams"], run["mismatched_streams"]) == (checked, mismatched), run
    # Locust's last table counts the same streams (its requests): the failed are the faulty
    # model's, the complete the right one's
    right = re.findall(r"gRPC-stream +trtllm_lm +(\d+) +0\(0\.00%\)", output)[-1]
    wrong = re.findall(r"HTTP-stream +vllm_lm_faulty +(\d+) +\d+\(100\.00%\)", output)[-1]
    assert (complete, failed) == (int(right), int(wrong)), (counts[0], right, wrong)


SWEEP = ("--concurrency-range", "2", "--check-every", "1", "--triton-load-warmup", "200",
         "--triton-measurement-interval", "500", "--triton-stability-percentage", "50",
         "--max-trials", "3", "--no-progress")  # fmt: skip


@pytest.mark.parametrize(
    ("layout", "url"), [("trtllm", "grpc://{grpc}"), ("vllm", "http://{http}")]
)
def test_triton_perf_drives_each_layout_with_every_answer_checked(
    served: Endpoints, tmp_path: Path, layout: str, url: str
) -> None:
    out = tmp_path / f"{layout}.csv"
    where = url.format(grpc=served.grpc, http=served.http)
    model = f"tests.helpers.stream_models:{layout}_layout_spec"
    done = Locust([*triton_perf_args(model), "--url", where, *SWEEP, "-f", str(out)]).finish(120)
    assert done.code == 0, done.tail()
    (row,) = list(csv.DictReader(out.open()))
    assert int(row["Answers Checked"]) > 0 and int(row["Wrong Answers"]) == 0, row
    assert int(row["Output Tokens"]) == 16 * int(row["Streams"]), row
