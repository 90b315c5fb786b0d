"""Models for triton-tune's tests: one whose answers depend on the batch it is run in, one
whose cost per execution does not depend on the batch (batching pays off), and one whose INT8
variant is broken (calibrated on zeros)."""

from __future__ import annotations

import torch

from pytest_triton import ModelSpec


class BatchCentered(torch.nn.Module):
    """Each row minus the mean of the batch it was run in: a request of one row alone answers
    zeros, the same row batched with others does not. Dynamic batching changes its answers."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=0, keepdim=True)


class FixedCost(torch.nn.Module):
    """A few milliseconds of work that does not depend on the batch (matrix products of its
    own weights, as a launch-bound GPU kernel costs the same for 1 row or 16), then a tiny
    per-row layer: batching requests multiplies its throughput. Serve it as TorchScript:
    ONNX Runtime would fold the weights-only products into a constant at load."""

    def __init__(self, size: int = 256, rounds: int = 4) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.rounds = rounds
        self.big = torch.nn.Parameter(torch.randn(size, size, generator=g) / size**0.5, False)
        self.weight = torch.nn.Parameter(0.5 * torch.eye(4) + 0.01, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.big
        for _ in range(self.rounds):
            h = torch.tanh(h @ self.big)
        return torch.tanh(x @ self.weight) + 0.0 * h.mean()


def _inputs(batch: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(batch, 4, generator=g)}


def _spec(name: str, module: torch.nn.Module) -> ModelSpec:
    return ModelSpec(
        name=name,
        module=module,
        example_inputs=_inputs(2, 0),
        inputs=["x"],
        outputs=["y"],
        max_batch_size=16,
        dynamic_batching=None,  # committed: no dynamic batching
        input_factory=_inputs,
    )


def batch_centered_spec() -> ModelSpec:
    return _spec("centered", BatchCentered())


def fixed_cost_spec() -> ModelSpec:
    return _spec("fixedcost", FixedCost())


def digits_zeros_spec() -> ModelSpec:
    """The digits CNN whose INT8 variant was calibrated on zeros: its fp32 variant keeps
    fp32's top-1, its INT8 one loses most of it (tests/accuracy/test_int8.py's broken
    variant, the same export)."""
    import numpy as np

    from pytest_triton.models import digits

    return digits.int8_spec("digits_zeros", np.zeros((64, 1, 28, 28), np.float32))


class CenteredBeyondEight(torch.nn.Module):
    """Each row minus its batch's mean, but only in an execution of more than 8 rows (no
    shape-dependent branch: the rows are counted with tensor ops, so every export keeps the
    rule): right alone and for 8 single-row requests batched together (triton-tune's
    parity check), wrong when dynamic batching joins requests of 4 rows into 12 or 16."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = torch.cumsum(torch.ones_like(x[:, :1]), dim=0)
        beyond = (rows > 8).to(x.dtype).max()
        return x - beyond * x.mean(dim=0, keepdim=True)


def wrong_beyond_eight_spec() -> ModelSpec:
    """Committed with dynamic batching (a 20 ms queue delay), which changes its answers."""
    import dataclasses

    from pytest_triton import DynamicBatching

    return dataclasses.replace(
        _spec("beyond8", CenteredBeyondEight()),
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=20_000),
    )
