"""Bad specs fail with a message naming the field, before any export writes a file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytest_triton import (
    DynamicBatching,
    InstanceGroup,
    Int8,
    Repository,
    SpecError,
    TensorSpec,
)
from tests.helpers.tiny_models import scorer_inputs, scorer_spec


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"name": "a/b"}, "no path separators", id="name-with-slash"),
        pytest.param({"name": "..\\x"}, "no path separators", id="name-with-backslash"),
        pytest.param({"name": ""}, "not a valid Triton model directory name", id="empty-name"),
        pytest.param(
            {"max_batch_size": -1},
            "max_batch_size must be an integer >= 0",
            id="negative-max-batch",
        ),
        pytest.param({"version": 0}, "version must be an integer >= 1", id="version-zero"),
        pytest.param(
            {"inputs": [TensorSpec("x", dtype="FP33"), "idx"]},
            "unknown dtype 'FP33'",
            id="unknown-dtype",
        ),
        pytest.param(
            {"inputs": ["x"]}, "do not match the declared inputs", id="example-not-declared"
        ),
        pytest.param(
            {"inputs": ["x", "idx", "extra"]}, "missing ['extra']", id="declared-without-example"
        ),
        pytest.param(
            {"example_inputs": [torch.zeros(2, 4)]},
            "1 example input(s) given for 2 declared",
            id="example-count",
        ),
        pytest.param(
            {"inputs": [TensorSpec("x", dtype=torch.float16), "idx"]},
            "has dtype torch.float32, but the input is declared FP16",
            id="example-dtype-mismatch",
        ),
        pytest.param(
            {"inputs": [TensorSpec("x", dims=(5,)), "idx"]},
            "does not match declared dims [5]",
            id="example-dims-mismatch",
        ),
        pytest.param(
            {
                "example_inputs": {
                    "x": torch.zeros(4, 4),
                    "idx": torch.zeros(3, 2, dtype=torch.long),
                }
            },
            "disagree on the batch size",
            id="example-batch-disagree",
        ),
        pytest.param(
            {"max_batch_size": 2},
            "example batch size 4 exceeds max_batch_size 2",
            id="example-batch-above-max",
        ),
        pytest.param(
            {"max_batch_size": 0},
            "dynamic_batching needs max_batch_size > 0",
            id="batching-without-batch-axis",
        ),
        pytest.param(
            {"dynamic_batching": DynamicBatching(preferred_batch_size=(4, 16))},
            "preferred_batch_size [16] must lie in 1..max_batch_size",
            id="preferred-above-max",
        ),
        pytest.param(
            {"instance_group": InstanceGroup(count=0)}, "count must be >= 1", id="zero-instances"
        ),
        pytest.param({"outputs": []}, "declare at least one output", id="no-outputs"),
        pytest.param(
            {"outputs": ["a", "a"]}, "duplicate output names ['a']", id="duplicate-outputs"
        ),
        pytest.param(
            {"dynamic_axes": {"nope": [1]}}, "not a declared input", id="dynamic-axis-unknown-input"
        ),
        pytest.param(
            {"dynamic_axes": {"x": [0]}}, "axis 0, the batch axis", id="dynamic-axis-batch"
        ),
        pytest.param(
            {"formats": ["onnx", "tflite"]}, "unknown export format 'tflite'", id="unknown-format"
        ),
        pytest.param(
            {"int8": "per_channel"}, "int8 must be True, False or an Int8(...)", id="int8-string"
        ),
        pytest.param(
            {"int8": Int8(op_types="MatMul")},  # type: ignore[arg-type]
            "Int8.op_types must be a tuple of names, e.g. ('MatMul', 'Gemm')",
            id="int8-op-types-not-a-tuple",
        ),
    ],
)
def test_bad_spec_fails_before_export(
    tmp_path: Path, overrides: dict[str, object], message: str
) -> None:
    root = tmp_path / "repo"
    with pytest.raises(SpecError) as info:
        Repository(root, [scorer_spec(**overrides)])
    assert message in str(info.value)
    assert not any(root.rglob("*")), "nothing may be written for a bad spec"


def test_duplicate_model_names(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="two specs are named 'scorer'"):
        Repository(tmp_path, [scorer_spec(), scorer_spec()])


def test_output_count_mismatch_is_named(tmp_path: Path) -> None:
    repo = Repository(tmp_path, [scorer_spec(outputs=["only_one"])])
    (variant,) = repo.plan(["python"])[:1]
    with pytest.raises(SpecError, match=r"forward\(\) returned 2 output\(s\) but 1 are declared"):
        repo.ensure(variant)
    assert not (tmp_path / variant.model_name).exists()


def test_make_inputs_cycles_rows_with_distinct_values() -> None:
    spec = scorer_spec(input_factory=None)
    batch = spec.make_inputs(9, seed=0)
    assert batch["x"].shape == (9, 4) and batch["idx"].shape == (9, 2)
    rows = {tuple(r) for r in batch["x"].round(6).tolist()}
    assert len(rows) == 9, "cycled rows must differ so request order is observable"
    assert (batch["idx"][:4] == scorer_inputs()["idx"].numpy()).all()
