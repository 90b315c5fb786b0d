"""A user's parametrized parity test over fp32 and int8 variants, as pytest runs it: the fp32
variant passes element-wise parity, the int8 one is skipped saying that accuracy judges it,
and the same int8 variant passes an accuracy check in the same session."""

from __future__ import annotations

import pytest

CONFTEST = """
import torch
from pytest_triton import ModelSpec, factories

class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.lin = torch.nn.Linear(16, 10)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    def forward(self, x):
        return self.lin(x)

SPEC = ModelSpec(name="affine", module=Affine, example_inputs=(torch.randn(4, 16),),
                 inputs=["x"], outputs=["y"], max_batch_size=32, formats=["onnx"], int8=True)
triton_repository = factories.repository([SPEC])
"""

TESTS = """
import numpy as np

def test_parity(triton_model, triton_client):
    triton_model.assert_parity(triton_client)

def test_accuracy(triton_model, triton_client):
    x = np.random.default_rng(0).standard_normal((128, 16)).astype(np.float32)
    triton_model.assert_accuracy(triton_client, [x[i : i + 16] for i in range(0, 128, 16)],
                                 "top1_agreement", min_ratio=0.95, min_samples=100)
"""


def test_an_int8_variants_parity_test_is_skipped_saying_accuracy_judges_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_user=TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-rs", "--triton-protocol", "http", timeout=600
    )
    result.assert_outcomes(passed=3, skipped=1)
    out = result.stdout.str()
    assert "affine-onnx-int8-hosted is INT8" in out and "judge it by accuracy" in out, out
