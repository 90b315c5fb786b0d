"""Greedy generation of a causal token model, written once: PyTorch's reference in process
(repository/stream.py) and the served decoupled model (stream_model.py, inside Triton's python
stub, where this file is copied beside it) both run `greedy_tokens`, and both refuse a request
with `problem_of`'s words. It imports torch only.

Two kinds of module generate:
- stateless: `forward(tokens [1, T]) -> logits [1, V]`; each step feeds the whole sequence;
- carrying a state (a recurrent state, a cache): it has an `initial_state()` method (exported
  with `@torch.jit.export` so that TorchScript keeps it) and `forward(tokens [1, T], start,
  state) -> (logits [1, V], state)`, where `start` is the position of `tokens[0]`; the prompt
  goes in once, then one token a step.

The served model's iteration-level schedule steps many streams at once (`Decoding`, one
stream's loop driven from outside, and `step_group`): streams whose next forward reads the
same number of positions share one forward over their stacked rows. No padding: without an
attention mask it would change a causal model's answers. A batched matmul does not sum a row
as the same matmul of that row alone does, in the last bits (MKL on CPU differs by about 1e-7),
so exactness is defined per kind and checked by `fusing_problem` at load:
- stateless: the tokens are exact. A fused row whose top two logits are closer than MARGIN
  (relative to the row's largest) is recomputed alone; the probe measures the batch's noise
  on probe sequences and refuses fusing where it exceeds NOISE_SHARE of the margin;
- carrying a state: a state computed in a batch would carry its last bits on, so its streams
  share a forward only where the module declares its state's batch dimension
  (`state_batch_dim`, an int attribute: `[layers, B, hidden]` is 1), its state is one tensor,
  and a batched forward answers every row, logits and state, bit for bit as alone;
else the schedule steps one stream a forward.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch


def problem_of(
    prompt: Sequence[int], max_tokens: int, vocab: int, context: int | None
) -> str | None:
    """Why a request cannot be generated (None when it can). `context` None: no limit."""
    if len(prompt) == 0:
        return "the prompt is empty: send at least one token"
    if context is not None and len(prompt) > context:
        return (
            f"the prompt has {len(prompt)} tokens, longer than the model's context of "
            f"{context}: shorten it to at most {context}"
        )
    bad = [int(t) for t in prompt if not 0 <= int(t) < vocab]
    if bad:
        return f"prompt token {bad[0]} is outside the vocabulary [0, {vocab})"
    if max_tokens < 1:
        return f"MAX_TOKENS is {max_tokens}: ask for at least one token"
    if context is not None and len(prompt) + max_tokens - 1 > context:
        return (
            f"{len(prompt)} prompt tokens + {max_tokens} new tokens need "
            f"{len(prompt) + max_tokens - 1} positions, more than the model's context of "
            f"{context}: ask for at most {context - len(prompt) + 1} new tokens"
        )
    return None


def carries_state(module: Any) -> bool:
    """Whether the module carries a state between steps (it has `initial_state`)."""
    return hasattr(module, "initial_state")


def logits_problem(logits: Any, vocab: int, rows: int = 1) -> str | None:
    """Why a forward's output is not next-token logits [rows, vocab] (None when it is)."""
    if not isinstance(logits, torch.Tensor):
        return f"forward returned {type(logits).__name__}, not a logits tensor"
    if tuple(logits.shape) != (rows, vocab):
        return (
            f"forward mapped token ids [{rows}, T] to a tensor of shape {list(logits.shape)}: "
            f"a causal model's forward must give next-token logits of shape [{rows}, {vocab}] "
            f"(batch, vocabulary of {vocab})"
        )
    return None


def _argmax(logits: Any, vocab: int) -> int:
    problem = logits_problem(logits, vocab)
    if problem:
        raise ValueError(problem)
    return int(torch.argmax(logits[0]))


MAX_GROUP = 8
"""The most streams one forward takes (the exactness probe covers every size up to it)."""
MARGIN = 1e-3
"""A stateless fused row whose top two logits are closer than this share of its largest
logit (at least 1) is recomputed alone: too close to call through a batch's rounding."""
NOISE_SHARE = 0.1
"""The probe's measured batch noise (relative, as MARGIN) must stay under this share of it."""
# The sequence lengths the probe stacks (a matmul of one row may take another kernel).
PROBE_LENGTHS = (1, 5)


def state_batch_dim(module: Any) -> int | None:
    """The batch dimension of a state-carrying module's state, as it declares it (None: not
    declared, so its states are not stacked)."""
    value = getattr(module, "state_batch_dim", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Decoding:
    """One stream's greedy generation, advanced a step at a time by its caller (the served
    model's iteration-level schedule), the same loop as `greedy_tokens`."""

    def __init__(
        self, module: Any, prompt: Sequence[int], max_tokens: int, stop_token: int, vocab: int
    ) -> None:
        self.stateful = carries_state(module)
        self.feed = [int(t) for t in prompt]  # what the next forward reads
        self.start = 0  # stateful: the position of feed[0]
        self.state: Any = module.initial_state() if self.stateful else None
        self.max_tokens, self.stop_token, self.vocab = max_tokens, stop_token, vocab
        self.generated = 0
        self.done = False

    def key(self) -> tuple[int, int]:
        """Decodings with equal keys read as many positions in their next forward (and, for a
        stateful module, start at the same position): they can share it."""
        return (self.start, len(self.feed))

    def advance(self, logits: torch.Tensor, state: Any) -> int:
        """Take the next token from this stream's logits row [1, V] (and its new state)."""
        token = _argmax(logits, self.vocab)
        self.generated += 1
        if self.stateful:
            self.state = state
            self.start += len(self.feed)
            self.feed = [token]
        else:
            self.feed.append(token)
        self.done = token == self.stop_token or self.generated >= self.max_tokens
        return token


def groups(decodings: Sequence[Decoding], fuse: bool) -> list[list[int]]:
    """The decodings' indexes, grouped by what can share a forward (equal keys, at most
    MAX_GROUP a group); one a group when not fusing."""
    if not fuse:
        return [[i] for i in range(len(decodings))]
    by_key: dict[tuple[int, int], list[list[int]]] = {}
    for i, decoding in enumerate(decodings):
        chunks = by_key.setdefault(decoding.key(), [[]])
        if len(chunks[-1]) == MAX_GROUP:
            chunks.append([])
        chunks[-1].append(i)
    return [chunk for chunks in by_key.values() for chunk in chunks]


def _forward(module: Any, group: Sequence[Decoding], dim: int | None) -> tuple[Any, list[Any]]:
    """One forward over the group's stacked rows: the logits [len(group), V] and each row's
    new state (None for a stateless module)."""
    tokens = torch.tensor([d.feed for d in group], dtype=torch.int64)
    if not group[0].stateful:
        return module(tokens), [None] * len(group)
    if len(group) == 1:
        logits, state = module(tokens, torch.tensor(group[0].start), group[0].state)
        return logits, [state]
    assert dim is not None  # groups of several are formed only where the state stacks
    stacked = torch.cat([d.state for d in group], dim)
    logits, state = module(tokens, torch.tensor(group[0].start), stacked)
    return logits, [part.contiguous() for part in torch.split(state, 1, dim)]


def _scale(row: torch.Tensor) -> float:
    return max(1.0, float(row.abs().max()))


def _clear(row: torch.Tensor) -> bool:
    """Whether a logits row [1, V]'s best token leads the next by more than MARGIN."""
    if row.shape[-1] < 2:
        return True
    top = torch.topk(row[0], 2).values
    return float(top[0] - top[1]) > MARGIN * _scale(row)


@torch.inference_mode()
def step_group(module: Any, group: Sequence[Decoding], dim: int | None = None) -> list[int]:
    """One greedy step of every decoding of a group (equal keys) in one forward: their next
    tokens. A stateless row too close to call (`_clear`) is recomputed alone. `dim`: the
    state's batch dimension (state_batch_dim), for a stateful group."""
    logits, states = _forward(module, group, dim)
    problem = logits_problem(logits, group[0].vocab, len(group))
    if problem:
        raise ValueError(problem)
    tokens = []
    for i, (decoding, state) in enumerate(zip(group, states, strict=True)):
        row = logits[i : i + 1]
        if len(group) > 1 and not decoding.stateful and not _clear(row):
            row = _forward(module, [decoding], dim)[0]
        tokens.append(decoding.advance(row, state))
    return tokens


def _differs(
    module: Any, vocab: int, dim: int | None, size: int, prompts: list[list[int]]
) -> float:
    """How far a forward over `size` streams answers from each stream alone over two steps
    (a prompt step and a token step): the largest difference of a logit relative to its
    row's scale, infinite where a state differs in any bit."""
    alone = [Decoding(module, p, 2, -1, vocab) for p in prompts[:size]]
    together = [Decoding(module, p, 2, -1, vocab) for p in prompts[:size]]
    worst = 0.0
    for _ in range(2):
        stacked, states = _forward(module, together, dim)
        problem = logits_problem(stacked, vocab, size)
        if problem:
            raise ValueError(problem)
        for i, decoding in enumerate(alone):
            logits, (state,) = _forward(module, [decoding], dim)
            gap = float((logits - stacked[i : i + 1]).abs().max()) / _scale(logits)
            if state is not None and (gap > 0 or not torch.equal(state, states[i])):
                return math.inf  # a state-carrying module must batch bit for bit
            worst = max(worst, gap)
            decoding.advance(logits, state)
            together[i].advance(logits, states[i])  # the same token: the same next step
    return worst


@torch.inference_mode()
def fusing_problem(module: Any, vocab: int) -> str | None:
    """Why streams of this module cannot share a forward exactly (None: they can): a stateful
    module without a declared state batch dimension, with a state that is not one tensor, or
    whose batched forward differs from a stream's alone in any bit; a stateless one whose
    batched rows differ from alone by more than NOISE_SHARE of MARGIN; a forward that fails
    on a batch. Probed with every group size up to MAX_GROUP, sequences of PROBE_LENGTHS."""
    dim = state_batch_dim(module)
    if carries_state(module):
        if dim is None:
            return "its state's batch dimension is not declared (state_batch_dim)"
        if not isinstance(module.initial_state(), torch.Tensor):
            return "its state is not one tensor"
    generator = torch.Generator().manual_seed(0)
    for length in PROBE_LENGTHS:
        prompts = torch.randint(0, vocab, (MAX_GROUP, length), generator=generator).tolist()
        for size in range(2, MAX_GROUP + 1):
            try:
                gap = _differs(module, vocab, dim, size, prompts)
            except Exception as exc:
                return f"a forward over {size} streams failed: {type(exc).__name__}: {exc}"
            if math.isinf(gap):
                return (
                    f"a forward over {size} streams of {length} tokens answers otherwise than "
                    "each stream alone, and its state would carry the difference on"
                )
            if gap > NOISE_SHARE * MARGIN:
                return (
                    f"a forward over {size} streams of {length} tokens answers each stream "
                    f"alone within {gap:.2g} of its largest logit, more than "
                    f"{NOISE_SHARE * MARGIN:.2g}"
                )
    return None


@torch.inference_mode()
def greedy_tokens(
    module: Any, prompt: Sequence[int], max_tokens: int, stop_token: int, vocab: int
) -> Iterator[int]:
    """Yield the greedy tokens one by one (the stop token, when generated, is the last): one
    stream's `Decoding`, stepped alone."""
    decoding = Decoding(module, prompt, max_tokens, stop_token, vocab)
    while not decoding.done and decoding.generated < max_tokens:
        yield step_group(module, [decoding])[0]
