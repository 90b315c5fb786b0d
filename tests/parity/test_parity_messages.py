"""assert_parity's verdicts and messages, on arrays (no server needed to judge a comparison)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_triton import Tolerance, assert_parity
from pytest_triton.parity.compare import compare_outputs


def test_mismatch_message_names_everything() -> None:
    native = {"logits": np.zeros((4, 10), np.float32)}
    served = {"logits": native["logits"].copy()}
    served["logits"][2, 7] = 0.5
    served["logits"][3, 1] = 1e-3
    with pytest.raises(AssertionError) as info:
        assert_parity(
            native, served, model="mnist", backend="mnist-onnx-hosted", protocol="grpc", fmt="onnx"
        )
    text = str(info.value)
    for part in (
        "model 'mnist'",
        "backend 'mnist-onnx-hosted'",
        "protocol 'grpc'",
        "output 'logits'",
        "dtype FP32",
        "max abs diff 0.5",
        "max rel diff inf",
        "mismatched 2 / 40",
        "worst at index (2, 7)",
        "served 0.5 vs native 0.0",
        "rtol 1.3e-06, atol 1e-05",
    ):
        assert part in text, (part, text)


def test_default_tolerance_is_torch_testing_per_dtype() -> None:
    base = np.ones(5, np.float32)
    within = base * (1 + 1e-6)
    beyond = base * (1 + 1e-4)
    assert compare_outputs({"y": base}, {"y": within}).ok
    assert not compare_outputs({"y": base}, {"y": base + 2e-5}).ok
    half = base.astype(np.float16)
    assert compare_outputs({"y": half}, {"y": (base * (1 + 5e-4)).astype(np.float16)}).ok
    assert not compare_outputs({"y": base}, {"y": beyond}).ok


def test_backend_widening_and_per_call_override() -> None:
    base = np.ones(3, np.float32)
    drift = base * (1 + 5e-4)
    assert not compare_outputs({"y": base}, {"y": drift}, fmt="onnx").ok
    assert compare_outputs({"y": base}, {"y": drift}, fmt="tensorrt").ok  # TF32 tactics: rtol 1e-3
    assert compare_outputs({"y": base}, {"y": drift}, fmt="onnx", rtol=1e-3).ok
    assert not compare_outputs(
        {"y": base}, {"y": drift}, fmt="tensorrt", tolerances={"y": Tolerance(0, 0, "exact")}
    ).ok


def test_integer_outputs_must_be_exact() -> None:
    report = compare_outputs({"label": np.array([1, 2, 3])}, {"label": np.array([1, 2, 4])})
    assert not report.ok
    assert "mismatched 1 / 3" in report.describe()


@pytest.mark.parametrize(
    ("served", "problem"),
    [
        ({}, "missing from the served response"),
        ({"y": np.zeros((2, 3), np.float32)}, "served shape (2, 3) != native shape (3, 2)"),
        ({"y": np.zeros((3, 2), np.float64)}, "served dtype float64 != native dtype float32"),
    ],
)
def test_structural_problems(served: dict[str, np.ndarray], problem: str) -> None:
    report = compare_outputs({"y": np.zeros((3, 2), np.float32)}, served)
    assert not report.ok and problem in report.describe()


def test_nan_is_a_mismatch_unless_both_nan() -> None:
    a = np.array([np.nan, 1.0], np.float32)
    assert compare_outputs({"y": a}, {"y": a.copy()}).ok
    assert not compare_outputs({"y": a}, {"y": np.array([0.0, 1.0], np.float32)}).ok
