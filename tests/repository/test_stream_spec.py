"""A user's own generator as a StreamSpec: the greedy reference from the module, refusals of
a module that is not a causal model, and, on the real bundled tritonserver (one for the
module), a GRU language model (`forward(tokens) -> logits`) and a user's module carrying a
state, each served by the generic decoupled model.py and checked token by token over gRPC
streaming and HTTP generate_stream; and the same two with iteration-level batching, streams
served together equal to each alone, streams at one position sharing one forward."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from pytest_triton.base.errors import SpecError
from pytest_triton.client.streaming import GrpcStreams, Streamed, StreamError, generate_http
from pytest_triton.models.gru_lm import GruLM, gru_lm, gru_lm_spec
from pytest_triton.parity.token_match import assert_stream_parity
from pytest_triton.repository import stream_greedy
from pytest_triton.repository.stream import (
    MODEL_SOURCE,
    StreamSpec,
    generate,
    write_stream_model,
)
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import Endpoints

VOCAB = 40
MAX_TOKENS = 12


class CachedLM(nn.Module):
    """A user's generator that carries its GRU state between steps (no positions: `start`
    is taken and unused), written here, not in the zoo."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32 + 16, VOCAB)

    @torch.jit.export
    def initial_state(self) -> torch.Tensor:
        return torch.zeros(1, 1, 32)

    def forward(
        self, tokens: torch.Tensor, start: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(tokens)
        out, state = self.gru(x, state)
        return self.head(torch.cat([out[:, -1], x[:, -1]], 1)), state


def cached_lm() -> CachedLM:
    torch.manual_seed(3)
    return CachedLM().eval()


GRU_SPEC = gru_lm_spec(name="user_gru_lm", vocab=VOCAB)
CACHED_SPEC = StreamSpec(name="user_cached_lm", generator=cached_lm, vocab=VOCAB, instances=1)
ITERATION = {  # the same generators, their streams advanced step by step together
    spec.name: dataclasses.replace(spec, name=f"{spec.name}_iteration", batching="iteration")
    for spec in (GRU_SPEC, CACHED_SPEC)
}
SPECS = (GRU_SPEC, CACHED_SPEC, *ITERATION.values())
RECORDING = dataclasses.replace(GRU_SPEC, name="user_gru_lm_recording", batching="iteration")
TOGETHER = 4
RECORDER = """

class TritonPythonModel(TritonPythonModel):
    # records each forward's group size, a line a forward; an idle instance waits for
    # {count} streams before its first iteration, so that they join together
    def _arrivals(self, block):
        arrived = super()._arrivals(block)
        while block and None not in arrived and len(arrived) < {count}:
            arrived += super()._arrivals(True)
        return arrived

    def forward(self, decodings):
        with open({path!r}, "a") as f:
            f.write(f"{{len(decodings)}}\\n")
        return super().forward(decodings)
"""
PROMPTS = GRU_SPEC.prompts(4, length=5)
LONG = 600
"""The first stream's budget: the others (MAX_TOKENS) are sent right after it and join it
between its steps. It must outlast their way to the model: with 60 tokens a loaded CI
machine (three workers on two cores) once delivered them after it had ended. 600 steps of
this GRU take about 0.3 s of the stub's CPU; the requests sent with it arrive in
milliseconds."""


@pytest.fixture(scope="module")
def forwards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the recording model writes its forwards' group sizes."""
    return tmp_path_factory.mktemp("forwards") / "forwards.txt"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, forwards: Path) -> Iterator[Endpoints]:
    root: Path = tmp_path_factory.mktemp("user_streams")
    for spec in SPECS:
        write_stream_model(root, spec)
    recorder = RECORDER.format(count=TOGETHER, path=str(forwards))
    write_stream_model(root, RECORDING, MODEL_SOURCE.read_text() + recorder)
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as server:
        yield server.endpoints


def expected(spec: StreamSpec, prompt: list[int], stop: int = -1) -> list[int]:
    return generate(spec.module(), prompt, MAX_TOKENS, stop, vocab=spec.vocab)


# -- the reference, no server ----------------------------------------------------------------
def test_stateless_greedy_feeds_the_whole_sequence() -> None:
    """The reference of a forward(tokens) -> logits model is argmax over the sequence so far,
    step by step (written out here with the module's own forward)."""
    module = gru_lm(vocab=VOCAB)
    sequence = list(PROMPTS[0])
    with torch.inference_mode():
        for _ in range(MAX_TOKENS):
            sequence.append(int(module(torch.tensor([sequence])).argmax()))
    assert generate(module, PROMPTS[0], MAX_TOKENS) == sequence[len(PROMPTS[0]) :]
    assert len({tuple(expected(GRU_SPEC, p)) for p in PROMPTS}) == len(PROMPTS)


def test_a_state_carrying_generator_equals_feeding_the_whole_sequence() -> None:
    """A GRU's state after the prompt and each token is the state after the whole sequence:
    the state-carrying loop and a from-scratch pass agree token for token."""
    module = cached_lm()
    served_way = expected(CACHED_SPEC, PROMPTS[1])
    sequence = list(PROMPTS[1])
    with torch.inference_mode():
        for _ in range(MAX_TOKENS):
            feed = torch.tensor([sequence])
            logits, _ = module(feed, torch.tensor(0), module.initial_state())
            sequence.append(int(logits.argmax()))
    assert served_way == sequence[len(PROMPTS[1]) :]


class NotCausal(nn.Module):
    """Gives logits for every position ([B, T, V]), not the next token's."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)


def test_a_module_that_is_not_a_causal_generator_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    wrong_shape = StreamSpec(name="every_position", generator=NotCausal, vocab=VOCAB)
    with pytest.raises(SpecError) as caught:
        write_stream_model(tmp_path, wrong_shape)
    assert "'every_position': NotCausal does not generate as a causal model" in str(caught.value)
    assert f"a tensor of shape [1, 2, {VOCAB}]" in str(caught.value)
    assert f"logits of shape [1, {VOCAB}]" in str(caught.value)
    other_vocab = StreamSpec(name="small_vocab", generator=lambda: GruLM(vocab=8), vocab=VOCAB)
    with pytest.raises(SpecError, match=r"shape \[1, 8\]: a causal model's forward"):
        write_stream_model(tmp_path, other_vocab)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SpecError, match="has no generator: pass generator="):
        StreamSpec(name="nothing")


# -- served on the real tritonserver ---------------------------------------------------------
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_a_users_generator_streams_its_greedy_tokens_over_grpc_and_http(
    served: Endpoints, spec: StreamSpec
) -> None:
    with GrpcStreams(served.grpc, timeout_s=30) as streams:
        together = streams.generate_many(spec.name, PROMPTS, MAX_TOKENS)
    for i, streamed in enumerate(together):
        assert streamed.final_at is not None
        assert_stream_parity(streamed.tokens, expected(spec, PROMPTS[i]), context=f"prompt {i}")
    over_http = generate_http(served.http, spec.name, PROMPTS[2], MAX_TOKENS)
    assert_stream_parity(over_http.tokens, expected(spec, PROMPTS[2]), context="HTTP")


def test_the_stop_token_and_the_vocabulary_hold_for_a_users_generator(
    served: Endpoints,
) -> None:
    full = expected(GRU_SPEC, PROMPTS[3])
    stop = full[3]
    with GrpcStreams(served.grpc) as streams:
        stopped = streams.generate(GRU_SPEC.name, PROMPTS[3], MAX_TOKENS, stop_token=stop)
        assert (
            stopped.tokens == full[: full.index(stop) + 1] == expected(GRU_SPEC, PROMPTS[3], stop)
        )
        with pytest.raises(Exception, match=rf"prompt token {VOCAB} is outside the vocabulary"):
            streams.generate(GRU_SPEC.name, [1, VOCAB], 3)
        assert (
            streams.generate(GRU_SPEC.name, PROMPTS[0], 3).tokens
            == expected(GRU_SPEC, PROMPTS[0])[:3]
        )


def test_an_unknown_batching_schedule_is_refused_naming_the_schedules() -> None:
    with pytest.raises(SpecError, match=r"batching='dynamic' is not a schedule: 'none': each"):
        dataclasses.replace(GRU_SPEC, batching="dynamic")


def _together(grpc: str, spec: StreamSpec, stop: int) -> tuple[list[Streamed], str]:
    """Sent at once on one gRPC stream to the model's one instance: a long stream, then three
    of MAX_TOKENS (the last with a stop token), one of a longer prompt, and a refused one."""
    other = GRU_SPEC.prompts(1, length=9, seed=5)[0]
    asked = [(PROMPTS[0], LONG, -1), (PROMPTS[1], MAX_TOKENS, -1), (PROMPTS[2], MAX_TOKENS, -1)]
    asked += [(PROMPTS[3], MAX_TOKENS, stop), (other, MAX_TOKENS, -1)]
    with GrpcStreams(grpc, timeout_s=60) as streams:
        sent = [streams.send(spec.name, p, n, s) for p, n, s in asked]
        refused = streams.send(spec.name, [1, VOCAB], 3)
        answers = [streams.collect(spec.name, *one) for one in sent]
        with pytest.raises(StreamError) as caught:
            streams.collect(spec.name, *refused)
    module = spec.module()
    for (prompt, budget, stop_token), streamed in zip(asked, answers, strict=True):
        want = generate(module, prompt, budget, stop_token, vocab=VOCAB)
        assert_stream_parity(streamed.tokens, want, context=f"{spec.name} {prompt}")
    return answers, str(caught.value)


@pytest.mark.parametrize("alone", (GRU_SPEC, CACHED_SPEC), ids=lambda s: s.name)
def test_streams_generated_together_equal_each_alone_token_for_token(
    served: Endpoints, alone: StreamSpec
) -> None:
    """Iteration-level batching: short streams sent after a long one finish before it (they
    joined it between its steps; one stream at a time, they wait for its end), every
    stream equals the reference and the one-at-a-time model's answer token for token, a stop
    token ends its stream alone, and a refused request fails alone."""
    together = ITERATION[alone.name]
    stop = expected(alone, PROMPTS[3])[3]
    batched, batched_error = _together(served.grpc, together, stop)
    one_by_one, one_error = _together(served.grpc, alone, stop)
    assert [s.tokens for s in batched] == [s.tokens for s in one_by_one]
    assert len(batched[3].tokens) == expected(alone, PROMPTS[3]).index(stop) + 1
    long, *short = batched
    assert all(s.final_at is not None and long.final_at is not None for s in batched)
    # joined between its steps: a short stream ended while the long one still ran (on a
    # loaded machine the last ones may arrive late; one stream at a time, none can)
    assert min(s.final_at or 0.0 for s in short) < (long.final_at or 0.0), "not interleaved"
    long, *short = one_by_one
    assert min(s.final_at or 0.0 for s in short) > (long.final_at or 0.0)
    for error in (batched_error, one_error):
        assert f"prompt token {VOCAB} is outside the vocabulary" in error


def _step_together(
    module: nn.Module, prompts: list[list[int]], budgets: list[int], fuse: bool = True
) -> tuple[list[list[int]], list[int]]:
    """The served schedule in process: every stream one token per iteration, one forward
    per group; each stream's tokens, and each forward's group size."""
    dim = stream_greedy.state_batch_dim(module)
    active = [
        stream_greedy.Decoding(module, p, n, -1, VOCAB)
        for p, n in zip(prompts, budgets, strict=True)
    ]
    tokens: list[list[int]] = [[] for _ in prompts]
    sizes: list[int] = []
    index = list(range(len(prompts)))
    while active:
        for group in stream_greedy.groups(active, fuse):
            sizes.append(len(group))
            next_tokens = stream_greedy.step_group(module, [active[i] for i in group], dim)
            for i, token in zip(group, next_tokens, strict=True):
                tokens[index[i]].append(token)
        index = [i for i, d in zip(index, active, strict=True) if not d.done]
        active = [d for d in active if not d.done]
    return tokens, sizes


class Decaying(nn.Module):
    """A user's generator carrying a state it declares stackable (`state_batch_dim`), built of
    lookups and elementwise steps only: a batch answers each row bit for bit as alone."""

    def __init__(self) -> None:
        super().__init__()
        self.state_batch_dim = 0
        self.embed = nn.Embedding(VOCAB, VOCAB)
        self.decay = nn.Parameter(torch.rand(VOCAB))

    @torch.jit.export
    def initial_state(self) -> torch.Tensor:
        return torch.zeros(1, VOCAB)

    def forward(
        self, tokens: torch.Tensor, start: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for t in range(tokens.shape[1]):
            state = torch.tanh(state * self.decay + self.embed(tokens[:, t]))
        return 3 * state + self.embed(tokens[:, -1]).roll(1, 1), state


def decaying() -> Decaying:
    torch.manual_seed(5)
    return Decaying().eval()


@pytest.mark.parametrize("make", [lambda: gru_lm(vocab=VOCAB), decaying], ids=["gru", "state"])
def test_streams_at_one_position_share_a_forward_and_equal_each_alone(
    make: Callable[[], nn.Module],
) -> None:
    """A stateless module (its batched rows within rounding of alone) and one carrying a
    declared state (bit for bit): streams step together, one forward per group of equal
    length (prompts of 5, 5, 5 and 7 tokens: the three, then the two left, share one; the
    7-token one, always two ahead, runs alone), and every stream's tokens equal its greedy
    generation alone."""
    module = make()
    assert stream_greedy.fusing_problem(module, VOCAB) is None
    prompts = [*PROMPTS[:3], GRU_SPEC.prompts(1, length=7, seed=9)[0]]
    budgets = [MAX_TOKENS, MAX_TOKENS, 4, MAX_TOKENS]
    tokens, sizes = _step_together(module, prompts, budgets)
    for prompt, budget, got in zip(prompts, budgets, tokens, strict=True):
        assert got == generate(module, prompt, budget, vocab=VOCAB)
    assert len({tuple(t) for t in tokens}) == len(tokens)  # the prompts told apart
    # 4 steps of three 5-token streams and the 7-token one, then 8 of two and of one
    assert sizes == [3, 1] * 4 + [2, 1] * (MAX_TOKENS - 4), sizes
    unfused, one_each = _step_together(module, prompts, budgets, fuse=False)
    assert unfused == tokens and set(one_each) == {1}


class RowsMeet(nn.Module):
    """Each row's logits see the batch's mean: alone, a row is as it is; together, not."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.embed(tokens).sum(1)
        return 2 * logits - logits.mean(0, keepdim=True)


def test_a_module_that_does_not_batch_exactly_steps_one_stream_a_forward() -> None:
    """The probe refuses rows that see each other, and a state whose batch dimension is not
    declared; such modules serve one stream a forward (the log says why)."""
    meeting = str(stream_greedy.fusing_problem(RowsMeet(), VOCAB))
    assert re.fullmatch(
        r"a forward over 2 streams of 1 tokens answers each stream alone within [\d.e-]+ of "
        r"its largest logit, more than 0.0001",
        meeting,
    ), meeting
    undeclared = stream_greedy.fusing_problem(cached_lm(), VOCAB)
    assert undeclared == "its state's batch dimension is not declared (state_batch_dim)"
    # a GRU's state through a batched matmul differs from alone in its last bits (MKL on
    # CPU): it would carry them on, so the zoo's generator steps one stream a forward there
    declared = CachedLM().eval()
    declared.state_batch_dim = 1
    assert stream_greedy.fusing_problem(declared, VOCAB) in (
        None,  # a machine whose kernels sum a batch's rows as each alone
        "a forward over 2 streams of 1 tokens answers otherwise than each stream alone, and "
        "its state would carry the difference on",
    )


def test_streams_served_together_share_one_forward_a_step(
    served: Endpoints, forwards: Path
) -> None:
    """On the real server: four streams of equal prompt length, joined in one iteration, run
    one forward of four a step (the model records each forward's group size), and each
    equals its greedy generation alone."""
    with GrpcStreams(served.grpc, timeout_s=30) as streams:
        together = streams.generate_many(RECORDING.name, PROMPTS[:TOGETHER], MAX_TOKENS)
    for i, streamed in enumerate(together):
        assert_stream_parity(streamed.tokens, expected(GRU_SPEC, PROMPTS[i]), context=f"{i}")
    assert forwards.read_text().split() == [str(TOGETHER)] * MAX_TOKENS


class LengthBound(nn.Module):
    """Reads its prompt's length as a Python number: a trace fixes it to the example's."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 16)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = int(tokens.shape[1])
        return self.embed(tokens).sum(1) * float(length)


def test_a_trace_that_fixes_the_prompt_length_is_refused(tmp_path: Path) -> None:
    spec = StreamSpec(name="length_bound", generator=LengthBound, vocab=16, torchscript="trace")
    with pytest.raises(SpecError, match=r"does not answer as the module for a 1-token prompt"):
        write_stream_model(tmp_path, spec)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SpecError, match="torchscript='tracing': give 'script'"):
        StreamSpec(name="x", generator=LengthBound, vocab=16, torchscript="tracing")
