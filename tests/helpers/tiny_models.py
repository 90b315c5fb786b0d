"""Small modules for the plugin's own tests (the zoo's models are tested in tests/zoo)."""

from __future__ import annotations

import torch

from pytest_triton import DynamicBatching, ModelSpec


class Scorer(torch.nn.Module):
    """Dense + embedding inputs, two outputs of different dtypes: exercises typed I/O."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.dense = torch.nn.Linear(4, 3)
        self.table = torch.nn.Embedding(10, 3)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        score = torch.sigmoid(self.dense(x) + self.table(idx).sum(1))
        return score, torch.argmax(score, dim=1)


def scorer_inputs(batch: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(batch, 4, generator=g),
        "idx": torch.randint(0, 10, (batch, 2), generator=g),
    }


def scorer_spec(name: str = "scorer", **overrides: object) -> ModelSpec:
    fields: dict[str, object] = dict(
        name=name,
        module=Scorer,
        example_inputs=scorer_inputs(),
        inputs=["x", "idx"],
        outputs=["score", "label"],
        max_batch_size=8,
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=50_000),
        input_factory=lambda batch, seed: scorer_inputs(batch, seed),
    )
    fields.update(overrides)
    return ModelSpec(**fields)  # type: ignore[arg-type]


class Guarded(torch.nn.Module):
    """A branch on the data (an overflow guard): TorchScript scripts or traces it, torch.export
    cannot capture it without torch.cond."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.dense = torch.nn.Linear(4, 3)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dense(x)
        if bool((x.abs() > 1e3).any()):
            y = y.clamp(-1e3, 1e3)
        return y


def guarded_spec(name: str = "guarded", **overrides: object) -> ModelSpec:
    fields: dict[str, object] = dict(
        name=name,
        module=Guarded,
        example_inputs={"x": torch.randn(4, 4, generator=torch.Generator().manual_seed(0))},
        inputs=["x"],
        outputs=["y"],
        max_batch_size=8,
        input_factory=lambda batch, seed: {
            "x": torch.randn(batch, 4, generator=torch.Generator().manual_seed(seed))
        },
    )
    fields.update(overrides)
    return ModelSpec(**fields)  # type: ignore[arg-type]
