"""config.pbtxt is produced by model_config_pb2 + text_format and says what the spec says."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton import DynamicBatching, InstanceGroup, Repository
from pytest_triton.repository import hosted_model, pbtxt, torch_compat
from tests.helpers.tiny_models import scorer_spec


def _config(tmp_path: Path, backends: list[str], fmt: str, **overrides: object) -> mc.ModelConfig:
    repo = Repository(tmp_path, [scorer_spec(formats=[fmt], **overrides)])
    (variant,) = repo.plan(backends)
    directory = repo.ensure(variant)
    assert (directory / str(variant.spec.version) / variant.artifact).is_file()
    return pbtxt.read_config(directory / "config.pbtxt")


def test_scheduling_fields(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        ["python"],
        "torchscript-trace",
        max_batch_size=64,
        version=3,
        dynamic_batching=DynamicBatching(
            max_queue_delay_microseconds=1500, preferred_batch_size=(16, 32)
        ),
        instance_group=InstanceGroup(count=2, kind="KIND_CPU"),
    )
    assert config.name == "scorer_torchscript_trace"
    assert config.max_batch_size == 64
    assert config.dynamic_batching.max_queue_delay_microseconds == 1500
    assert list(config.dynamic_batching.preferred_batch_size) == [16, 32]
    assert [(g.count, mc.ModelInstanceGroup.Kind.Name(g.kind)) for g in config.instance_group] == [
        (2, "KIND_CPU")
    ]
    assert (tmp_path / "scorer_torchscript_trace" / "3" / "model.pt").is_file()


def test_io_types_and_dims_come_from_pytorch(tmp_path: Path) -> None:
    config = _config(tmp_path, ["python"], "onnx")
    io = [
        (t.name, mc.DataType.Name(t.data_type), list(t.dims))
        for t in list(config.input) + list(config.output)
    ]
    assert io == [
        ("x", "TYPE_FP32", [4]),
        ("idx", "TYPE_INT64", [2]),
        ("score", "TYPE_FP32", [3]),
        ("label", "TYPE_INT64", [1]),
    ]
    # A per-row scalar: Triton needs non-empty dims, the backend returns [batch].
    assert config.output[1].HasField("reshape") and list(config.output[1].reshape.shape) == []
    assert not config.output[0].HasField("reshape")


def test_hosted_variant_names_its_artifact(tmp_path: Path) -> None:
    config = _config(tmp_path, ["python"], "onnx")
    assert config.backend == "python" and not config.platform
    assert config.parameters["artifact"].string_value == "model.onnx"
    assert config.parameters["artifact_format"].string_value == "onnx"
    assert (tmp_path / "scorer_onnx" / "1" / "model.py").is_file()
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in config.parameters  # onnxruntime takes numpy


def test_hosted_torchscript_takes_its_inputs_where_they_are(tmp_path: Path) -> None:
    """The DLPack path of hosted_model.py: inputs in GPU memory stay there."""
    config = _config(tmp_path, ["python"], "torchscript-trace")
    assert config.parameters["artifact_format"].string_value == "torchscript"
    assert config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"


@pytest.mark.parametrize(
    ("fmt", "platform"), [("onnx", "onnxruntime_onnx"), ("torchscript-script", "pytorch_libtorch")]
)
def test_native_variant_uses_the_backend_platform(tmp_path: Path, fmt: str, platform: str) -> None:
    config = _config(tmp_path, ["python", "onnxruntime", "pytorch"], fmt)
    assert config.platform == platform and not config.backend
    assert "artifact" not in config.parameters
    assert not (tmp_path / config.name / "1" / "model.py").exists()


def test_dynamic_axes_become_minus_one(tmp_path: Path) -> None:
    import torch

    class Seq(torch.nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return ids.float().cumsum(1)

    from pytest_triton import ModelSpec

    spec = ModelSpec(
        name="seq",
        module=Seq(),
        example_inputs=(torch.ones(2, 7, dtype=torch.long),),
        inputs=["ids"],
        outputs=["sums"],
        max_batch_size=4,
        dynamic_axes={"ids": [1]},
        formats=["torchscript-trace"],
    )
    repo = Repository(tmp_path, [spec])
    (variant,) = repo.plan(["python"])
    config = pbtxt.read_config(repo.ensure(variant) / "config.pbtxt")
    assert list(config.input[0].dims) == [-1] and list(config.output[0].dims) == [-1]


def test_text_round_trips_through_protobuf(tmp_path: Path) -> None:
    config = _config(tmp_path, ["python"], "torchscript-script")
    text = (tmp_path / "scorer_torchscript_script" / "config.pbtxt").read_text()
    assert text == pbtxt.to_text(config)
    assert 'name: "scorer_torchscript_script"' in text


def test_pt2_formats_are_hosted_even_beside_the_pytorch_backend(tmp_path: Path) -> None:
    """No server here runs a .pt2 natively: the python backend hosts it, the id says so."""
    config = _config(tmp_path, ["python", "pytorch", "onnxruntime"], "torch-export")
    assert config.backend == "python" and config.name == "scorer_torch_export"
    assert config.parameters["artifact"].string_value == "model.pt2"
    assert config.parameters["artifact_format"].string_value == "torch-export"
    assert config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"
    assert "aoti_loader" not in config.parameters


def test_an_aoti_config_names_the_loader_torch_compat_keeps(tmp_path: Path) -> None:
    repo = Repository(tmp_path, [scorer_spec(formats=["aoti"])])
    (variant,) = repo.plan(["python", "pytorch"])
    assert variant.id == "scorer-aoti-hosted"
    config = repo.config(variant)  # planned, not compiled
    assert config.parameters["artifact_format"].string_value == "aoti"
    assert config.parameters["aoti_loader"].string_value == torch_compat.LOADER


def test_an_aoti_package_is_refused_where_it_cannot_run(tmp_path: Path) -> None:
    """hosted_model.py checks the torch and the device the config says the package was
    compiled by and for, before loading it."""
    repo = Repository(tmp_path, [scorer_spec(formats=["aoti"])])
    (variant,) = repo.plan(["python"])
    params = {k: v.string_value for k, v in repo.config(variant).parameters.items()}
    assert hosted_model.package_problem(params, torch.__version__, gpu=False) is None
    other = hosted_model.package_problem(params, "2.99.0", gpu=False)
    assert other is not None
    assert f"compiled by torch {torch.__version__}" in other and "has torch 2.99.0" in other
    gpu = hosted_model.package_problem(params, torch.__version__, gpu=True)
    assert gpu is not None and "compiled for the CPU, the instance runs on a CUDA GPU" in gpu
