"""A GRU language model of the plainest kind a user brings: `forward(tokens [B, T]) ->
next-token logits [B, V]`, no state carried between calls (each step sees the whole
sequence). Served and checked through a StreamSpec like any user's generator
(docs/streams.md); the zoo's TinyGenerator is the kind that carries its state.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from pytest_triton.repository.stream import StreamSpec


class GruLM(nn.Module):
    """Embedding, a one-layer GRU over the sequence, a linear head on its last step."""

    def __init__(self, vocab: int = 48, dim: int = 24, hidden: int = 48) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embed(tokens))
        logits: torch.Tensor = self.head(out[:, -1])
        return logits


def gru_lm(seed: int = 0, vocab: int = 48) -> GruLM:
    """The model in eval mode, weights drawn from a local generator (the global RNG is never
    touched)."""
    generator = torch.Generator().manual_seed(seed)
    model = GruLM(vocab)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.rand(parameter.shape, generator=generator) * 1.2 - 0.6)
    return model.eval()


def gru_lm_spec(
    name: str = "gru_lm",
    seed: int = 0,
    vocab: int = 48,
    instances: int = 1,
    batching: str = "none",
) -> StreamSpec:
    """The GRU language model as a StreamSpec (no context limit: it reads any length)."""
    return StreamSpec(
        name=name,
        generator=lambda: gru_lm(seed, vocab),
        vocab=vocab,
        instances=instances,
        batching=batching,
    )


def gru_one_stream_spec() -> StreamSpec:
    """The GRU language model, one instance generating one stream at a time (`-m
    pytest_triton.models.gru_lm:gru_one_stream_spec`; vocabulary 64, the triton-perf prompts')."""
    return gru_lm_spec(name="gru_lm_one", vocab=64)


def gru_unfused_spec() -> StreamSpec:
    """Its streams advanced step by step together, one forward per stream."""
    return dataclasses.replace(
        gru_one_stream_spec(), name="gru_lm_unfused", batching="iteration", fuse=False
    )


def gru_iteration_spec() -> StreamSpec:
    """Its streams advanced step by step together, one forward per group of streams of equal
    length (a stateless module: its batched rows are checked within rounding of alone)."""
    return dataclasses.replace(gru_one_stream_spec(), name="gru_lm_iteration", batching="iteration")
