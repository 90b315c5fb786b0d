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
"""

from __future__ import annotations

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


def logits_problem(logits: Any, vocab: int) -> str | None:
    """Why a forward's output is not next-token logits [1, vocab] (None when it is)."""
    if not isinstance(logits, torch.Tensor):
        return f"forward returned {type(logits).__name__}, not a logits tensor"
    if tuple(logits.shape) != (1, vocab):
        return (
            f"forward mapped token ids [1, T] to a tensor of shape {list(logits.shape)}: a "
            f"causal model's forward must give next-token logits of shape [1, {vocab}] "
            f"(batch, vocabulary of {vocab})"
        )
    return None


def _argmax(logits: Any, vocab: int) -> int:
    problem = logits_problem(logits, vocab)
    if problem:
        raise ValueError(problem)
    return int(torch.argmax(logits[0]))


@torch.inference_mode()
def greedy_tokens(
    module: Any, prompt: Sequence[int], max_tokens: int, stop_token: int, vocab: int
) -> Iterator[int]:
    """Yield the greedy tokens one by one (the stop token, when generated, is the last)."""
    ids = [int(t) for t in prompt]
    if carries_state(module):
        state = module.initial_state()
        feed = torch.tensor([ids], dtype=torch.int64)
        start = 0
        for _ in range(max_tokens):
            logits, state = module(feed, torch.tensor(start), state)
            token = _argmax(logits, vocab)
            yield token
            if token == stop_token:
                return
            start += feed.shape[1]
            feed = torch.tensor([[token]], dtype=torch.int64)
    else:
        sequence = list(ids)
        for _ in range(max_tokens):
            token = _argmax(module(torch.tensor([sequence], dtype=torch.int64)), vocab)
            yield token
            if token == stop_token:
                return
            sequence.append(token)
