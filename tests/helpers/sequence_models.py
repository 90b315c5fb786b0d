"""A deliberately broken stateful model for the sequence tests: it keeps its hidden state in
a module buffer instead of the state it is handed, so served sequences mix."""

from __future__ import annotations

import torch

from pytest_triton.models import streaming_gru
from pytest_triton.repository.sequence import SequenceSpec, Strategy

IDLE_US = 10_000_000
"""Ten seconds of idle before the batcher drops a sequence, not Triton's default one: sixteen
interleaved sequences on a machine running the whole suite once left one second between a
sequence's START and its next step, and the batcher had dropped it ("must specify the START
flag")."""


class BufferGRU(streaming_gru.StreamingGRU):
    """Right for one sequence on a fresh module (its buffer starts as the initial zeros);
    wrong as soon as one served module hosts several sequences: every row reads and writes
    the same buffer."""

    def __init__(self, config: streaming_gru.Config) -> None:
        super().__init__(config)
        self.memory: torch.Tensor
        self.register_buffer("memory", torch.zeros(1, config.hidden))

    def forward(
        self, frame: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.cell(frame, self.memory.expand(frame.shape[0], -1))
        self.memory.copy_(hidden[-1:])
        return self.head(hidden), hidden


def buffer_gru_spec(strategy: Strategy = "direct") -> SequenceSpec:
    config = streaming_gru.Config.small()

    def build() -> BufferGRU:
        model = BufferGRU(config)
        model.load_state_dict(streaming_gru.build(config).state_dict(), strict=False)
        return model.eval()

    return streaming_gru.sequence_spec(
        name="buffer_gru", strategy=strategy, module=build, max_sequence_idle_microseconds=IDLE_US
    )
