"""A generator built from a `transformers` config: GPT-2's architecture, small, random weights
from a seed, nothing downloaded (the `transformers` extra). Wrapped so that forward maps
token ids [B, T] to next-token logits [B, V], it is a stateless generator like `gru_lm`, and is
served through `torch.jit.trace` (torch.jit.script does not compile transformers' models;
the stream spec checks that the trace answers as the module at other prompt lengths).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pytest_triton.repository.stream import StreamSpec


class NextTokenLM(nn.Module):
    """A `transformers` causal LM as forward(tokens) -> the last position's logits."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.model(input_ids=tokens).logits[:, -1]
        return logits


def gpt2_lm(seed: int = 0, vocab: int = 64, context: int = 64) -> NextTokenLM:
    """A two-layer GPT-2 of width 32 from its config, weights drawn after seeding torch."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab,
        n_positions=context,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(seed)
    return NextTokenLM(GPT2LMHeadModel(config)).eval()


def gpt2_spec(name: str = "gpt2_lm", seed: int = 0, vocab: int = 64) -> StreamSpec:
    """The model as a StreamSpec (its context: GPT-2's 64 positions)."""
    return StreamSpec(
        name=name,
        generator=lambda: gpt2_lm(seed, vocab),
        vocab=vocab,
        context=64,
        instances=1,
        torchscript="trace",
    )
