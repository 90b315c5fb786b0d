"""The zoo's token generator: a small causal GRU model that carries its state between steps,
served as a decoupled (streaming) model by `stream_spec()`.

An embedding and a positional embedding over a fixed context, a two-layer GRU, a linear head;
random weights from a seed. It is one example of the generators a StreamSpec serves
(repository/stream_greedy.py names the two kinds); `gru_lm` is the other, stateless one.
"""

from __future__ import annotations

import torch
from torch import nn

from pytest_triton.repository.stream import StreamSpec


class TinyGenerator(nn.Module):
    """A causal model over `vocab` tokens and a fixed `context`: forward(tokens, start, state)
    gives the next token's logits after the last one and the GRU state, so generation feeds one
    token at a time after the prompt (`initial_state` says it carries a state; its state is
    [layers, batch, hidden], so `state_batch_dim` 1: streams at one position share a forward
    where its batched forward is bit-exact, stream_greedy.fusing_problem)."""

    def __init__(self, vocab: int = 64, context: int = 64, dim: int = 32, hidden: int = 64):
        super().__init__()
        self.context = context
        self.state_batch_dim = 1  # kept by TorchScript: the served model reads it
        self.layers = 2
        self.hidden = hidden
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(context, dim)
        self.gru = nn.GRU(dim, hidden, num_layers=self.layers, batch_first=True)
        # The head also sees the last token's embedding: a random GRU alone soon repeats one
        # token, and a stream of repeats would hide a model that ignores its prompt.
        self.head = nn.Linear(hidden + dim, vocab)
        with torch.no_grad():  # larger recurrent weights keep the prompt in the state longer
            for name, weight in self.gru.named_parameters():
                if name.startswith("weight"):
                    weight.mul_(3.0)

    @torch.jit.export
    def initial_state(self) -> torch.Tensor:
        return torch.zeros(self.layers, 1, self.hidden)

    def forward(
        self, tokens: torch.Tensor, start: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(tokens.shape[1]) + start
        x = self.embed(tokens) + self.position(positions).unsqueeze(0)
        out, state = self.gru(x, state)
        return self.head(torch.cat([out[:, -1], x[:, -1]], 1)), state


def tiny_generator(seed: int = 0, vocab: int = 64, context: int = 64) -> TinyGenerator:
    """The generator in eval mode, its weights drawn after seeding torch with `seed`."""
    torch.manual_seed(seed)
    return TinyGenerator(vocab, context).eval()


def stream_spec(
    name: str = "tiny_stream",
    seed: int = 0,
    vocab: int = 64,
    context: int = 64,
    instances: int = 2,
    batching: str = "none",
) -> StreamSpec:
    """The zoo's generator as a StreamSpec (`-m tiny_stream` in triton-perf)."""
    return StreamSpec(
        name=name,
        generator=lambda: tiny_generator(seed, vocab, context),
        vocab=vocab,
        context=context,
        instances=instances,
        batching=batching,
    )


def iteration_stream_spec() -> StreamSpec:
    """`-m tiny_stream`'s generator, one instance, its streams advanced step by step together
    (`-m pytest_triton.models.tiny_generator:iteration_stream_spec`)."""
    return stream_spec(name="tiny_stream_iteration", instances=1, batching="iteration")


def one_stream_spec() -> StreamSpec:
    """The same, one instance generating one stream at a time (what iteration_stream_spec is
    measured beside)."""
    return stream_spec(name="tiny_stream_one", instances=1, batching="none")
