"""Text streams as a vLLM deployment sends them, checked as text, with the tokenizers people
deploy (tests/helpers/text_tokenizers.py: WordLevel, byte-level BPE, Metaspace BPE, trained
here). One real bundled tritonserver serves each scheme's GRU language model in the vLLM
layout (faults on request, iteration-level scheduling) and the Metaspace one without token
counts: a right generator passes over gRPC and HTTP with the server's count equal to the
reference's, a wrong one fails naming the character and the token position, a wrong count
is a count difference, another tokenizer fails naming the first differing text, Locust
counts no wrong stream, and the iteration scheduler outlives a stream that raises."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_triton.client.streaming import GrpcStreams, StreamError, generate_http
from pytest_triton.parity.text_match import (
    TextReference,
    assert_text_parity,
    count_difference,
    first_text_difference,
)
from pytest_triton.repository.stream import expected_text, write_stream_model
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import Endpoints
from tests.helpers import text_tokenizers
from tests.helpers.locust_runs import REPO, run_locust
from tests.helpers.stream_models import CORRUPT_AT, ERROR_AT, write_faulty
from tests.helpers.text_tokenizers import PROMPTS, SCHEMES, text_spec, tokenizer, uncounted_spec

MAX_TOKENS = 12
UNCOUNTED = uncounted_spec("metaspace_bpe")


def faulty(scheme: str) -> str:
    return f"vllm_{scheme}_faulty"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    root: Path = tmp_path_factory.mktemp("text_streams")
    for scheme in SCHEMES:
        write_faulty(root, dataclasses.replace(text_spec(scheme), batching="iteration"))
    write_stream_model(root, UNCOUNTED)
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as server:
        yield server.endpoints


def reference(scheme: str, prompt: str, stop: int = -1, max_tokens: int = MAX_TOKENS):  # type: ignore[no-untyped-def]
    spec = text_spec(scheme)
    return expected_text(spec, spec.module(), prompt, max_tokens, stop)


# -- the tokenizers, no server ---------------------------------------------------------------
def test_the_tokenizers_train_fast_and_their_ids_do_not_survive_decoding_alone() -> None:
    """Each scheme trains in well under a second; byte-level BPE splits a character outside
    ASCII over several tokens (one alone decodes to the replacement character), and a
    Metaspace continuation piece decoded alone comes back as other ids: ids cannot be
    checked one chunk at a time."""
    for scheme, build in text_tokenizers.BUILDERS.items():
        started = time.perf_counter()
        build()
        assert time.perf_counter() - started < 1.0, scheme
    byte_level = tokenizer("bytelevel_bpe")
    ids = byte_level.encode("日本語").ids
    assert len(ids) > 3 and "\ufffd" in byte_level.decode(ids[:1])
    metaspace = tokenizer("metaspace_bpe")
    encoded = metaspace.encode("interesting testing")
    assert encoded.tokens[0] == "<s>"  # Llama's rule: a BOS before the prompt
    # the reference encodes a text prompt with the server's special-token rule
    layout, bos = text_spec("metaspace_bpe").interface, metaspace.token_to_id("<s>")
    assert layout.prompt_ids("the quick", metaspace)[0] == bos
    assert layout.prompt_ids("the quick", metaspace, add_special_tokens=False)[0] != bos
    alone = [
        metaspace.encode(metaspace.decode([i]), add_special_tokens=False).ids
        for i in encoded.ids[1:]
    ]
    assert any(again != [i] for again, i in zip(alone, encoded.ids[1:], strict=True)), alone


def test_a_text_reference_is_decoded_in_the_prompts_context() -> None:
    """The reference's text is the ids' text after the prompt's (a Metaspace word start is a
    space there), a stop token's text left out; a difference names the character, the token
    position it falls in, and both texts around it."""
    metaspace = tokenizer("metaspace_bpe")
    prompt_ids = metaspace.encode("the quick").ids
    ids = metaspace.encode("brown fox jumps", add_special_tokens=False).ids
    ref = TextReference.of(metaspace, prompt_ids, ids)
    assert ref.text == " brown fox jumps"
    stopped = TextReference.of(metaspace, prompt_ids, ids, stop_token=ids[-1])
    assert ref.text.startswith(stopped.text) and len(stopped.text) < len(ref.text)
    mismatch = first_text_difference(" brown fix jumps", ref)
    assert mismatch is not None and mismatch.char == 8
    assert (
        mismatch.token
        == ref.token_at(8)
        == next(
            p for p in range(len(ids)) if len(metaspace.decode([*prompt_ids, *ids[: p + 1]])) > 17
        )
    )
    assert "served 'i', expected 'o'" in mismatch.describe()
    assert count_difference(len(ids), ref) is None
    assert count_difference(len(ids) + 1, ref) == (
        f"count difference (the text is right): the server counted {len(ids) + 1} output "
        f"tokens, the reference generated {len(ids)}"
    )


# -- served on the real tritonserver ---------------------------------------------------------
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_right_generator_passes_as_text_over_grpc_and_http(
    served: Endpoints, scheme: str
) -> None:
    spec = text_spec(scheme)
    refs = [reference(scheme, p) for p in PROMPTS]
    stop = refs[1].ids[3]
    with GrpcStreams(served.grpc, interface=spec.interface, codec=spec.tokenizer) as streams:
        together = streams.generate_many(faulty(scheme), PROMPTS, MAX_TOKENS)
        stopped = streams.generate(faulty(scheme), PROMPTS[1], MAX_TOKENS, stop)
    over_http = generate_http(
        served.http, faulty(scheme), PROMPTS[2], MAX_TOKENS,
        interface=spec.interface, codec=spec.tokenizer,
    )  # fmt: skip
    for i, streamed in enumerate([*together, over_http]):
        ref = refs[i] if i < len(together) else refs[2]
        assert_text_parity(streamed.text or "", ref, context=f"{scheme} prompt {i}")
        assert streamed.server_tokens == len(ref.ids) == MAX_TOKENS, (scheme, i)
        assert streamed.responses == MAX_TOKENS  # one a token, empty deltas included
        assert len(streamed.arrived) == MAX_TOKENS and streamed.final_at is not None
    want_stopped = reference(scheme, PROMPTS[1], stop)
    assert_text_parity(stopped.text or "", want_stopped, context=f"{scheme} stopped")
    assert stopped.server_tokens == len(want_stopped.ids) == want_stopped.ids.index(stop) + 1


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_wrong_generator_fails_naming_the_character_and_token_position(
    served: Endpoints, scheme: str
) -> None:
    spec = text_spec(scheme)
    prompt = PROMPTS[0]
    with GrpcStreams(served.grpc, interface=spec.interface, codec=spec.tokenizer) as streams:
        streamed = streams.generate(
            faulty(scheme), prompt, MAX_TOKENS, parameters={"fault": "corrupt"}
        )
    with pytest.raises(AssertionError) as caught:
        assert_text_parity(streamed.text or "", reference(scheme, prompt), context=scheme)
    assert re.search(
        rf"{scheme}: streamed text differs from PyTorch's greedy generation first at "
        rf"character \d+, in token position {CORRUPT_AT}: served .+, expected .+ \(served "
        r"\.\.\..+\.\.\., expected \.\.\..+\.\.\.;",
        str(caught.value),
    ), str(caught.value)


def test_a_right_text_with_another_server_count_is_a_count_difference(
    served: Endpoints,
) -> None:
    spec = text_spec("bytelevel_bpe")
    with GrpcStreams(served.grpc, interface=spec.interface, codec=spec.tokenizer) as streams:
        streamed = streams.generate(
            faulty("bytelevel_bpe"), PROMPTS[2], MAX_TOKENS, parameters={"fault": "miscount"}
        )
    ref = reference("bytelevel_bpe", PROMPTS[2])
    assert_text_parity(streamed.text or "", ref)  # the text is right
    assert count_difference(streamed.server_tokens, ref, context="miscount") == (
        f"miscount: count difference (the text is right): the server counted "
        f"{MAX_TOKENS + 1} output tokens, the reference generated {MAX_TOKENS}"
    )


def test_without_server_counts_the_whole_text_is_encoded_once(served: Endpoints) -> None:
    """A layout that does not ask for num_output_tokens: the output tokens are the whole
    text encoded once (what AIPerf counts), not the deltas encoded one by one."""
    spec = UNCOUNTED
    with GrpcStreams(served.grpc, interface=spec.interface, codec=spec.tokenizer) as streams:
        streamed = streams.generate(spec.name, PROMPTS[0], MAX_TOKENS)
    ref = reference("metaspace_bpe", PROMPTS[0])
    assert_text_parity(streamed.text or "", ref)
    assert streamed.server_tokens is None and streamed.counted_by == "the whole text encoded once"
    whole = spec.tokenizer.encode(streamed.text, add_special_tokens=False).ids
    assert streamed.tokens == whole and streamed.output_tokens == len(whole)


def test_a_tokenizer_that_is_not_the_servers_fails_naming_the_first_differing_text(
    served: Endpoints,
) -> None:
    """The client's tokenizer is WordLevel, the server's Metaspace BPE: the same text prompt,
    the reference built with the client's tokenizer, the stream fails as one text."""
    other = dataclasses.replace(text_spec("metaspace_bpe"), tokenizer=tokenizer("wordlevel"))
    with GrpcStreams(served.grpc, interface=other.interface, codec=other.tokenizer) as streams:
        streamed = streams.generate(faulty("metaspace_bpe"), PROMPTS[0], MAX_TOKENS)
    want = expected_text(other, other.module(), PROMPTS[0], MAX_TOKENS)
    with pytest.raises(AssertionError, match=r"first at character \d+, in token position \d+"):
        assert_text_parity(streamed.text or "", want, context="another tokenizer")


def test_the_iteration_scheduler_outlives_a_stream_that_raises(served: Endpoints) -> None:
    """Three streams in one iteration schedule: one raises while finishing, one while
    generating its token at ERROR_AT; each ends with its own error response, the third
    completes right, and the model serves the next request."""
    scheme = "metaspace_bpe"
    spec = text_spec(scheme)
    long = 40
    with GrpcStreams(
        served.grpc, timeout_s=10, interface=spec.interface, codec=spec.tokenizer
    ) as streams:
        going = streams.send(faulty(scheme), PROMPTS[3], long)
        finishing = streams.send(
            faulty(scheme), PROMPTS[0], 4, parameters={"fault": "finish_error"}
        )
        stepping = streams.send(faulty(scheme), PROMPTS[1], 8, parameters={"fault": "error"})
        with pytest.raises(StreamError, match="injected failure while finishing the stream"):
            streams.collect(faulty(scheme), *finishing)
        with pytest.raises(StreamError, match=f"injected failure at token {ERROR_AT}"):
            streams.collect(faulty(scheme), *stepping)
        right = streams.collect(faulty(scheme), *going)
        after = streams.generate(faulty(scheme), PROMPTS[2], MAX_TOKENS)
    assert_text_parity(right.text or "", reference(scheme, PROMPTS[3], max_tokens=long))
    assert_text_parity(after.text or "", reference(scheme, PROMPTS[2]))


TEXT_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "streams_text.py"


def test_locust_checks_every_text_stream_and_counts_none_wrong(
    served: Endpoints, tmp_path: Path
) -> None:
    done = run_locust(
        TEXT_LOCUSTFILE,
        "--headless", "-t", "4s", "-u", "3", "-r", "3",
        "--triton-load-warmup", "1000", "--triton-check-every", "1",
        "--host", f"http://{served.http}",
        "--triton-grpc-url", f"grpc://{served.grpc}",
        tmp_path=tmp_path,
    )  # fmt: skip
    assert done.code == 0, done.tail()
    for kind, scheme in (
        ("gRPC", "wordlevel"),
        ("gRPC", "bytelevel_bpe"),
        ("HTTP", "metaspace_bpe"),
    ):
        row = re.findall(rf"{kind}-stream +{faulty(scheme)} +(\d+) +(\d+)\(", done.output)
        assert row and int(row[-1][0]) > 0 and row[-1][1] == "0", (scheme, done.tail())
    assert done.report is not None
    run = done.report["streams"]["run"]
    assert run["checked_streams"] == run["streams"] > 0 and run["mismatched_streams"] == 0, run
