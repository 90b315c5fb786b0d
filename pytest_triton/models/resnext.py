"""ResNet-50 / ResNeXt101-32x4d / SE-ResNeXt101-32x4d: the ``--config`` choices of NVIDIA's
ResNeXt example.

One bottleneck network covers all three: ResNeXt replaces the bottleneck's 3x3 convolution
by a grouped one (cardinality 32, 4 channels per group at the first stage), SE-ResNeXt adds
squeeze-and-excitation (reduction 16) before the residual sum. Strides sit on the 3x3
convolution ("v1.5"), as in NVIDIA's and torchvision's implementations; attribute names
follow torchvision (conv1/bn1/layer1..4/fc) so ImageNet checkpoints with that layout load.

Tensors: ``input__0`` float32 [B, 3, 224, 224] (normalised RGB) -> ``output__0`` float32
[B, 1000] (class logits). ``__0`` suffixes are the PyTorch-backend naming convention that
NVIDIA's ResNeXt example's deployer.py uses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from pytest_triton.models._common import PathLike, init_batchnorm, materialize

INPUT_NAMES: tuple[str, ...] = ("input__0",)
OUTPUT_NAMES: tuple[str, ...] = ("output__0",)
DYNAMIC_AXES: dict[str, tuple[int, ...]] = {}  # only the batch axis is dynamic

ARCHITECTURES: tuple[str, ...] = ("resnet50", "resnext101-32x4d", "se-resnext101-32x4d")


@dataclass(frozen=True)
class Config:
    """Bottleneck network hyper-parameters.

    The 3x3 convolution of a stage with ``planes`` channels has
    ``planes * width_per_group // stem_width * groups`` channels: plain ResNet-50 uses
    groups=1, width_per_group=64; ResNeXt 32x4d uses groups=32, width_per_group=4.
    ``se_reduction`` 0 disables squeeze-and-excitation.
    """

    arch: str = "resnext101-32x4d"
    layers: tuple[int, int, int, int] = (3, 4, 23, 3)
    groups: int = 32
    width_per_group: int = 4
    se_reduction: int = 0
    stem_width: int = 64
    num_classes: int = 1000
    image_size: int = 224

    def __post_init__(self) -> None:
        for i in range(4):
            planes = self.stem_width << i
            width = planes * self.width_per_group // self.stem_width * self.groups
            if width <= 0 or width % self.groups:
                raise ValueError(f"{self.arch}: stage {i + 1} bottleneck width {width} invalid")
        if self.image_size < 32:
            raise ValueError(f"image_size must be >= 32 (stride 32), got {self.image_size}")

    @classmethod
    def full(cls, arch: str = "resnext101-32x4d") -> Config:
        """The ImageNet network ``arch`` (one of ARCHITECTURES), 224x224, 1000 classes."""
        if arch == "resnet50":
            return cls(arch=arch, layers=(3, 4, 6, 3), groups=1, width_per_group=64)
        if arch == "resnext101-32x4d":
            return cls(arch=arch)
        if arch == "se-resnext101-32x4d":
            return cls(arch=arch, se_reduction=16)
        raise ValueError(f"unknown architecture {arch!r}; choose one of {ARCHITECTURES}")

    @classmethod
    def small(cls, arch: str = "resnext101-32x4d") -> Config:
        """Same block type, grouping and SE as ``arch``, one block per stage, 64x64 input.

        Small enough for a CPU forward at batch 2 in a few milliseconds.
        """
        full = cls.full(arch)
        groups = 1 if full.groups == 1 else 4
        return replace(
            full,
            layers=(1, 1, 1, 1),
            groups=groups,
            width_per_group=16 if groups == 1 else 4,
            se_reduction=4 if full.se_reduction else 0,
            stem_width=16,
            num_classes=10,
            image_size=64,
        )


class SqueezeExcitation(nn.Module):
    """Channel gating from global context; 1x1 convolutions keep the tensor 4-D."""

    def __init__(self, channels: int, reduction: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, channels // reduction, 1)
        self.fc2 = nn.Conv2d(channels // reduction, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = F.adaptive_avg_pool2d(x, 1)
        scale = torch.sigmoid(self.fc2(F.relu(self.fc1(scale))))
        return x * scale


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int, config: Config, downsample: bool
    ) -> None:
        super().__init__()
        width = planes * config.width_per_group // config.stem_width * config.groups
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=config.groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.se: nn.Module = (
            SqueezeExcitation(out, config.se_reduction) if config.se_reduction else nn.Identity()
        )
        self.downsample: nn.Module = (
            nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if downsample
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.se(self.bn3(self.conv3(out)))
        return F.relu(out + self.downsample(x))


class ResNet(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        stem = config.stem_width
        self.conv1 = nn.Conv2d(3, stem, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = stem
        stages: list[nn.Sequential] = []
        for i, blocks in enumerate(config.layers):
            planes = stem << i
            stride = 1 if i == 0 else 2
            stage = [Bottleneck(inplanes, planes, stride, config, downsample=True)]
            inplanes = planes * Bottleneck.expansion
            stage += [Bottleneck(inplanes, planes, 1, config, False) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(inplanes, config.num_classes)

    def forward(self, input__0: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(input__0))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        logits: torch.Tensor = self.fc(x)
        return logits


def _init(model: ResNet, gen: torch.Generator) -> None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d):
            if module.bias is None:
                nn.init.kaiming_normal_(
                    module.weight, mode="fan_out", nonlinearity="relu", generator=gen
                )
            else:  # squeeze-excitation FCs: keep gates away from saturation
                module.weight.normal_(0.0, module.weight[0].numel() ** -0.5, generator=gen)
                module.bias.zero_()
        elif isinstance(module, nn.BatchNorm2d):
            # The last BN of each residual branch starts small, so 33 untrained blocks add up
            # to O(1) activations instead of growing by ~2x per block.
            init_batchnorm(module, gen, gamma=0.2 if name.endswith("bn3") else 1.0)
        elif isinstance(module, nn.Linear):
            # fan-in scaled so the untrained logits are O(1), which makes parity tolerances
            # meaningful in absolute terms.
            module.weight.normal_(0.0, module.in_features**-0.5, generator=gen)
            assert module.bias is not None
            module.bias.zero_()


def construct(config: Config) -> ResNet:
    return ResNet(config)


def build(config: Config, seed: int = 0, checkpoint: PathLike | None = None) -> ResNet:
    return materialize(lambda: ResNet(config), _init, seed, checkpoint)


def example_inputs(config: Config, batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Standard-normal pixels: what ImageNet mean/std normalisation produces on average."""
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, 3, config.image_size, config.image_size)
    return {"input__0": torch.randn(shape, generator=gen)}
