"""A streaming GRU: the zoo's stateful model, served behind Triton's sequence batcher.

The shape of a streaming speech or session model: each request brings one frame of features
(a slice of audio features, one event of a user's session), a GRU cell folds it into the
sequence's hidden state, and a linear head scores the frame. The hidden state is what Triton
carries between the requests of one sequence.

Tensors per request: ``FRAME`` float32 [features] -> ``SCORES`` float32 [classes]; the state is
float32 [hidden], zeros at the start of a sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pytest_triton.repository.sequence import SequenceSpec, Strategy

INPUT_NAME = "FRAME"
OUTPUT_NAME = "SCORES"


@dataclass(frozen=True)
class Config:
    features: int = 40  # 40 log-mel bands, the usual streaming speech front end
    hidden: int = 256
    classes: int = 32

    @classmethod
    def full(cls) -> Config:
        return cls()

    @classmethod
    def small(cls) -> Config:
        return cls(features=16, hidden=32, classes=8)


class StreamingGRU(nn.Module):
    """step(frame, state) -> (scores, state): one GRU cell step and a linear head."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.cell = nn.GRUCell(config.features, config.hidden)
        self.head = nn.Linear(config.hidden, config.classes)

    def forward(
        self, frame: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        state = self.cell(frame, state)
        return self.head(state), state


def build(config: Config, seed: int = 0) -> StreamingGRU:
    """The model in eval mode, its weights drawn from a local generator."""
    generator = torch.Generator().manual_seed(seed)
    model = StreamingGRU(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.rand(parameter.shape, generator=generator) * 0.4 - 0.2)
    return model.eval()


def sequence_spec(
    size: str = "small",
    strategy: Strategy = "direct",
    *,
    seed: int = 0,
    name: str = "streaming_gru",
    **overrides: object,
) -> SequenceSpec:
    """The streaming GRU as a SequenceSpec (any SequenceSpec field can be overridden)."""
    config = Config.full() if size == "full" else Config.small()
    fields: dict[str, object] = dict(
        name=name,
        module=lambda: build(config, seed),
        initial_state=torch.zeros(config.hidden),
        example_input=torch.zeros(config.features),
        input_name=INPUT_NAME,
        output_name=OUTPUT_NAME,
        strategy=strategy,
    )
    fields.update(overrides)
    return SequenceSpec(**fields)  # type: ignore[arg-type]
