"""Small pipelines for the pipeline tests: pre-processing function, a classifier module,
post-processing function; a post-processing step whose traced export differs from PyTorch;
a step that raises inside the server."""

from __future__ import annotations

import torch

from pytest_triton import DynamicBatching
from pytest_triton.repository.pipeline import PipelineSpec, Step

# Long enough that eight requests put in flight by one client meet in the batcher.
PROVABLE = DynamicBatching(max_queue_delay_microseconds=20_000)


def normalize(image: torch.Tensor) -> torch.Tensor:
    """Pre-processing: uint8 pixels to centred floats."""
    return (image.float() / 255.0 - 0.5) / 0.25


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.body = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 5)
        )
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.body(pixels)


def top2(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Post-processing: softmax, then the two best classes and their probabilities."""
    found = torch.topk(torch.softmax(logits, dim=1), k=2, dim=1)
    return found.values, found.indices


def top2_scaled_by_trace_time_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A post-processing bug tracing hides: float() of a tensor becomes a constant of the
    example batch in the traced graph, so the served step scales by the wrong number."""
    scale = float(logits.abs().max())
    found = torch.topk(torch.softmax(logits / scale, dim=1), k=2, dim=1)
    return found.values, found.indices


class CheckedClassifier(Classifier):
    """Refuses NaN pixels by raising inside forward (scripted, so the raise is served)."""

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        if bool(torch.isnan(pixels).any()):
            raise ValueError("NaN pixels reached the classifier")
        return self.body(pixels)


def images(batch: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"image": torch.randint(0, 256, (batch, 4, 4), generator=g, dtype=torch.uint8)}


def pixels(batch: int, seed: int) -> dict[str, torch.Tensor]:
    """Batches other than the example one (whose largest logit tracing kept)."""
    g = torch.Generator().manual_seed(1000 + seed)
    return {"pixels": torch.randn(batch, 4, 4, generator=g)}


def classifier_pipeline(name: str = "classify", post=top2, **overrides: object) -> PipelineSpec:
    fields: dict[str, object] = dict(
        name=name,
        steps=[
            Step("preprocess", normalize, inputs=["image"], outputs=["pixels"]),
            Step("model", Classifier(), inputs=["pixels"], outputs=["logits"]),
            Step("postprocess", post, inputs=["logits"], outputs=["probs", "classes"]),
        ],
        example_inputs=images(),
        outputs=["probs", "classes"],
        dynamic_batching=PROVABLE,
        modes=("ensemble", "bls", "bls-async"),
        input_factory=images,
    )
    fields.update(overrides)
    return PipelineSpec(**fields)  # type: ignore[arg-type]


def wrong_pipeline(name: str = "wrong") -> PipelineSpec:
    """A classifier whose served post-processing differs from PyTorch's (see
    top2_scaled_by_trace_time_max); its model step is right, and raises on NaN pixels."""
    g = torch.Generator().manual_seed(1)
    return PipelineSpec(
        name=name,
        steps=[
            Step(
                "model",
                CheckedClassifier(),
                inputs=["pixels"],
                outputs=["logits"],
                format="torchscript-script",
            ),
            Step(
                "postprocess",
                top2_scaled_by_trace_time_max,
                inputs=["logits"],
                outputs=["probs", "classes"],
            ),
        ],
        example_inputs={"pixels": torch.randn(8, 4, 4, generator=g)},
        outputs=["probs", "classes"],
        modes=("ensemble", "bls", "bls-async"),
        input_factory=pixels,
    )
