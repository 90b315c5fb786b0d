"""The zoo's pipeline: MNIST as people deploy it, with its pre- and post-processing served as
steps of their own around the model: raw uint8 pixels in, normalized by a function step, the
zoo's MNIST CNN, then softmax and the top 3 digits. Served as an ensemble, a sync BLS model
and an async BLS model (PipelineSpec.modes), each checked against the three steps composed
in PyTorch."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pytest_triton.models import mnist
from pytest_triton.repository.pipeline import MODES, PipelineSpec, Step
from pytest_triton.repository.spec import DynamicBatching

# torchvision's MNIST normalization (mean and std of the training set's pixels).
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
TOP_K = 3


def mnist_preprocess(image: torch.Tensor) -> torch.Tensor:
    """uint8 [B, 28, 28] -> normalized float32 [B, 1, 28, 28], the CNN's input."""
    return ((image.float() / 255.0 - MNIST_MEAN) / MNIST_STD).unsqueeze(1)


def mnist_postprocess(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits -> the top-3 digits' probabilities and the digits."""
    found = torch.topk(torch.softmax(logits, dim=1), k=TOP_K, dim=1)
    return found.values, found.indices


def mnist_images(batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"image": torch.randint(0, 256, (batch_size, 28, 28), generator=g, dtype=torch.uint8)}


def mnist_pipeline(
    name: str = "mnist_pipeline",
    *,
    config: mnist.Config | None = None,
    model_format: str = "torchscript-trace",
    modes: Sequence[str] = MODES,
    max_queue_delay_microseconds: int = 20_000,
) -> PipelineSpec:
    """The pipeline at the small MNIST config by default; `model_format` exports the CNN
    step in any format the server offers (the function steps are traced)."""
    model = mnist.build(config or mnist.Config.small())
    return PipelineSpec(
        name=name,
        steps=[
            Step("preprocess", mnist_preprocess, inputs=["image"], outputs=["pixels"]),
            Step("model", model, inputs=["pixels"], outputs=["logits"], format=model_format),
            Step("postprocess", mnist_postprocess, ["logits"], ["probs", "digits"]),
        ],
        example_inputs=mnist_images(4),
        outputs=["probs", "digits"],
        max_batch_size=16,
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds),
        modes=tuple(modes),
        input_factory=mnist_images,
    )
