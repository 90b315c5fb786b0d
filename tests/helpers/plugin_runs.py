"""A user's pytest session run through pytester: the conftest most plugin tests start from."""

from __future__ import annotations

import pytest

CONFTEST = """
import torch
from pytest_triton import DynamicBatching, ModelSpec, factories

class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        with torch.no_grad():
            self.lin.weight.copy_(torch.arange(12.0).reshape(3, 4) / 10)
            self.lin.bias.fill_(0.5)

    def forward(self, x):
        return self.lin(x)

SPEC = ModelSpec(name="affine", module=Affine, example_inputs=(torch.randn(4, 4),),
                 inputs=["x"], outputs=["y"], max_batch_size=8,
                 dynamic_batching=DynamicBatching(max_queue_delay_microseconds=20000),
                 formats=["torchscript-trace"])
triton_repository = factories.repository([SPEC])
"""


def run(pytester: pytest.Pytester, *args: str, timeout: float = 300) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)
