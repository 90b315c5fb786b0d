"""Scene-text recogniser of Triton's tutorial (Triton tutorial part 2): "None-ResNet-None-CTC".

That is the configuration of Baek et al. 2019 ("What is wrong with scene text recognition
model comparisons?") without a rectification stage and without a sequence model: a ResNet
feature extractor (BasicBlocks, 1-2-5-3 blocks, 512 output channels) squeezes a 32x100 grey
image to a 1x26 feature map; each of the 26 columns is one CTC time step, classified by a
linear layer into 37 classes (blank + 0-9 + a-z).

Module/attribute names (FeatureExtraction.ConvNet.conv0_1, ..., Prediction) follow the
paper's reference code, so the tutorial's None-ResNet-None-CTC.pth loads after the usual
``module.`` prefix is stripped.

Tensors: ``input__0`` float32 [B, 1, 32, 100] -> ``output__0`` float32 [B, 26, 37] (per time
step logits; CTC decoding happens in the client). The tutorial's legacy ONNX export named
them ``input.1`` and ``308``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pytest_triton.models._common import PathLike, init_batchnorm, materialize

INPUT_NAMES: tuple[str, ...] = ("input__0",)
OUTPUT_NAMES: tuple[str, ...] = ("output__0",)
DYNAMIC_AXES: dict[str, tuple[int, ...]] = {}  # only the batch axis is dynamic


@dataclass(frozen=True)
class Config:
    """full() is the tutorial's STRModel(input_channels=1, output_channels=512, 37 classes)."""

    input_channels: int = 1
    output_channel: int = 512
    num_classes: int = 37
    layers: tuple[int, int, int, int] = (1, 2, 5, 3)
    image_height: int = 32
    image_width: int = 100

    def __post_init__(self) -> None:
        if self.output_channel % 16:
            raise ValueError(f"output_channel must be a multiple of 16, got {self.output_channel}")
        # Height 32 is reduced to exactly 1 row; taller images leave several rows, which are
        # averaged as the reference does (pretrained weights never saw them); shorter ones
        # vanish in the last unpadded 2x2 convolution.
        if self.image_height < 32 or self.image_width < 4:
            raise ValueError(
                f"image must be at least 32x4, got {self.image_height}x{self.image_width}"
            )

    @classmethod
    def full(cls) -> Config:
        return cls()

    @classmethod
    def small(cls) -> Config:
        return cls(output_channel=64, layers=(1, 1, 1, 1))

    @property
    def time_steps(self) -> int:
        """CTC sequence length: width / 4 after two 2x2 pools, +1 from each padded pool/conv
        of the last stages, -1 from the final unpadded 2x2 conv."""
        return self.image_width // 4 + 1


class BasicBlock(nn.Module):
    def __init__(self, inplanes: int, planes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module = (
            nn.Sequential(nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes))
            if inplanes != planes
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.downsample(x))


def _stage(inplanes: int, planes: int, blocks: int) -> nn.Sequential:
    return nn.Sequential(
        *[BasicBlock(inplanes if i == 0 else planes, planes) for i in range(blocks)]
    )


class ResNet(nn.Module):
    """The reference's asymmetric ResNet: late stages pool height only, keeping width as time."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        oc = config.output_channel
        widths = (oc // 4, oc // 2, oc, oc)
        self.conv0_1 = nn.Conv2d(config.input_channels, oc // 16, 3, 1, 1, bias=False)
        self.bn0_1 = nn.BatchNorm2d(oc // 16)
        self.conv0_2 = nn.Conv2d(oc // 16, oc // 8, 3, 1, 1, bias=False)
        self.bn0_2 = nn.BatchNorm2d(oc // 8)
        self.maxpool1 = nn.MaxPool2d(2, 2)
        self.layer1 = _stage(oc // 8, widths[0], config.layers[0])
        self.conv1 = nn.Conv2d(widths[0], widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.maxpool2 = nn.MaxPool2d(2, 2)
        self.layer2 = _stage(widths[0], widths[1], config.layers[1])
        self.conv2 = nn.Conv2d(widths[1], widths[1], 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(widths[1])
        self.maxpool3 = nn.MaxPool2d(2, (2, 1), (0, 1))
        self.layer3 = _stage(widths[1], widths[2], config.layers[2])
        self.conv3 = nn.Conv2d(widths[2], widths[2], 3, 1, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(widths[2])
        self.layer4 = _stage(widths[2], widths[3], config.layers[3])
        self.conv4_1 = nn.Conv2d(widths[3], widths[3], 2, (2, 1), (0, 1), bias=False)
        self.bn4_1 = nn.BatchNorm2d(widths[3])
        self.conv4_2 = nn.Conv2d(widths[3], widths[3], 2, 1, 0, bias=False)
        self.bn4_2 = nn.BatchNorm2d(widths[3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn0_1(self.conv0_1(x)))
        x = F.relu(self.bn0_2(self.conv0_2(x)))
        x = self.layer1(self.maxpool1(x))
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.maxpool2(x))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.layer3(self.maxpool3(x))
        x = F.relu(self.bn3(self.conv3(x)))
        x = self.layer4(x)
        x = F.relu(self.bn4_1(self.conv4_1(x)))
        return F.relu(self.bn4_2(self.conv4_2(x)))


class FeatureExtractor(nn.Module):
    """Wrapper level kept only so state_dict keys match the reference checkpoints."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.ConvNet = ResNet(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.ConvNet(x)
        return out


class STRModel(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.FeatureExtraction = FeatureExtractor(config)
        self.Prediction = nn.Linear(config.output_channel, config.num_classes)

    def forward(self, input__0: torch.Tensor) -> torch.Tensor:
        features = self.FeatureExtraction(input__0)  # [B, C, H', T]
        # The reference's AdaptiveAvgPool2d((None, 1)) on [B, T, C, H'] is a mean over H';
        # written as mean() because it exports to a plain ReduceMean with a dynamic batch.
        sequence = features.mean(dim=2).transpose(1, 2)  # [B, T, C]
        logits: torch.Tensor = self.Prediction(sequence)
        return logits


def _init(model: STRModel, gen: torch.Generator) -> None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(
                module.weight, mode="fan_out", nonlinearity="relu", generator=gen
            )
        elif isinstance(module, nn.BatchNorm2d):
            # The second BN of a residual branch gets a small scale so 11 stacked blocks
            # stay in a numerically comfortable range without training.
            init_batchnorm(
                module, gen, gamma=0.3 if name.endswith("bn2") and "layer" in name else 1.0
            )
        elif isinstance(module, nn.Linear):
            # fan-in scaled: O(1) logits keep absolute parity tolerances meaningful
            module.weight.normal_(0.0, module.in_features**-0.5, generator=gen)
            assert module.bias is not None
            module.bias.zero_()


def construct(config: Config) -> STRModel:
    return STRModel(config)


def build(config: Config, seed: int = 0, checkpoint: PathLike | None = None) -> STRModel:
    return materialize(lambda: STRModel(config), _init, seed, checkpoint)


def example_inputs(config: Config, batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Grey images normalised to [-1, 1], the reference's preprocessing range."""
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, config.input_channels, config.image_height, config.image_width)
    return {"input__0": torch.rand(shape, generator=gen) * 2.0 - 1.0}
