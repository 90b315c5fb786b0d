"""The MNIST CNN that the MNIST CPU example serves as ONNX on a CPU-only Triton.

The MNIST CPU example only prints the model's cost (thop at batch 12: ``OPS 84.686M, BYTES
2.374M``, at batch 13: ``91.743M``), so the architecture is the one those figures pin down:
three 3x3 "same" convolutions (32, 64, 96 channels), each followed by 2x2 max pooling and ReLU, then
fully connected layers 864-512-128-10. That is 7,057,152 MACs per image and 584,042
parameters; (584,042 + 12*784 + 12*10) * 4 bytes = 2.374M, exactly the example's BYTES.

Attribute names (conv1..conv3, fc1..fc3) follow the example project's module so that its
trained state_dict loads as is.

Tensors: ``input__0`` float32 [B, 1, 28, 28] -> ``output__0`` float32 [B, 10] (logits).
The example's own ONNX file named them ``input.1`` and ``26`` (exporter-generated names).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pytest_triton.models._common import PathLike, materialize

INPUT_NAMES: tuple[str, ...] = ("input__0",)
OUTPUT_NAMES: tuple[str, ...] = ("output__0",)
DYNAMIC_AXES: dict[str, tuple[int, ...]] = {}  # only the batch axis is dynamic


@dataclass(frozen=True)
class Config:
    """Layer widths; full() is the example's network, small() keeps its shape with fewer units."""

    channels: tuple[int, int, int] = (32, 64, 96)
    hidden: tuple[int, int] = (512, 128)
    num_classes: int = 10
    in_channels: int = 1
    image_size: int = 28

    def __post_init__(self) -> None:
        if self.image_size < 8:
            raise ValueError(f"image_size must be >= 8 (three 2x2 poolings), got {self.image_size}")

    @classmethod
    def full(cls) -> Config:
        return cls()

    @classmethod
    def small(cls) -> Config:
        return cls(channels=(8, 16, 24), hidden=(64, 32))

    @property
    def flat_features(self) -> int:
        side = self.image_size // 8
        return self.channels[2] * side * side


class MNISTNet(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        c1, c2, c3 = config.channels
        h1, h2 = config.hidden
        self.conv1 = nn.Conv2d(config.in_channels, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.conv3 = nn.Conv2d(c2, c3, 3, padding=1)
        self.fc1 = nn.Linear(config.flat_features, h1)
        self.fc2 = nn.Linear(h1, h2)
        self.fc3 = nn.Linear(h2, config.num_classes)

    def forward(self, input__0: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(input__0), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(F.max_pool2d(self.conv3(x), 2))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        # The example applies dropout here in training only and has no ReLU after fc2.
        x = self.fc2(x)
        logits: torch.Tensor = self.fc3(x)
        return logits


def _init(model: MNISTNet, gen: torch.Generator) -> None:
    """PyTorch's default fan-in uniform init, but drawn from ``gen``."""
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            fan_in = module.weight[0].numel()
            bound = fan_in**-0.5
            module.weight.uniform_(-bound, bound, generator=gen)
            assert module.bias is not None
            module.bias.uniform_(-bound, bound, generator=gen)


def construct(config: Config) -> MNISTNet:
    return MNISTNet(config)


def build(config: Config, seed: int = 0, checkpoint: PathLike | None = None) -> MNISTNet:
    return materialize(lambda: MNISTNet(config), _init, seed, checkpoint)


def example_inputs(config: Config, batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Images in [0, 1], like normalised MNIST pixels."""
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, config.in_channels, config.image_size, config.image_size)
    return {"input__0": torch.rand(shape, generator=gen)}
