"""triton-deploy with the examples' deployer flags, and the committed model_repository/ configs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_triton import TritonClient, assert_parity
from pytest_triton.cli.deploy import deploy, deploy_main
from pytest_triton.models import ZOO, dlrm
from pytest_triton.models.committed import committed_config
from pytest_triton.repository import pbtxt
from pytest_triton.server import LocalLauncher, ServerArgs

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL_DLRM = [
    "--embedding_dim",
    "16",
    "--bottom_mlp_sizes",
    "32",
    "16",
    "--top_mlp_sizes",
    "64",
    "32",
    "1",
    "--small",
]


def run_deploy(*argv: str) -> str:
    out = io.StringIO()
    assert deploy(list(argv), out) == 0
    return out.getvalue()


@pytest.mark.parametrize("name", list(ZOO))
def test_committed_configs_are_the_seeds_settings(name: str) -> None:
    committed = pbtxt.read_config(REPO_ROOT / "model_repository" / name / "config.pbtxt")
    assert committed == committed_config(name), (
        f"model_repository/{name}/config.pbtxt drifted from the zoo: regenerate it with "
        "`python -m pytest_triton.models.committed model_repository`"
    )


def test_committed_configs_carry_the_seeds_numbers() -> None:
    dlrm_config = committed_config("dlrm")
    assert dlrm_config.max_batch_size == 65536 and dlrm_config.platform == "onnxruntime_onnx"
    bert_config = committed_config("bert")
    assert list(bert_config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert bert_config.dynamic_batching.max_queue_delay_microseconds == 5000
    mnist_group = committed_config("mnist").instance_group[0]
    assert (mnist_group.count, mnist_group.kind) == (5, pbtxt.mc.ModelInstanceGroup.KIND_CPU)
    text_group = committed_config("text_recognition").instance_group[0]
    assert (text_group.count, text_group.kind) == (2, pbtxt.mc.ModelInstanceGroup.KIND_GPU)


@pytest.mark.triton
def test_done_when_dlrm_onnx_loads_and_matches_pytorch(tmp_path: Path) -> None:
    """The issue's acceptance command, through the console script, then checked by hand."""
    save = tmp_path / "repo"
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "triton-deploy"),
            "--onnx",
            "--triton-model-name",
            "dlrm-onnx",
            "--triton-max-batch-size",
            "4096",
            "--save-dir",
            str(save),
            "--",
            *SMALL_DLRM,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert f"wrote {save / 'dlrm-onnx' / 'config.pbtxt'}" in result.stdout
    assert f"wrote {save / 'dlrm-onnx' / '1' / 'model.onnx'}" in result.stdout
    config = pbtxt.read_config(save / "dlrm-onnx" / "config.pbtxt")
    assert config.max_batch_size == 4096 and config.name == "dlrm-onnx"

    model = dlrm.build(
        dlrm.Config.small().with_(
            embedding_dim=16, bottom_mlp_sizes=(32, 16), top_mlp_sizes=(64, 32, 1)
        ),
        seed=0,
    )
    inputs = dlrm.example_inputs(dlrm.Config.small(), batch_size=64, seed=7)
    with torch.inference_mode():
        native = model(*inputs.values()).numpy()
    with LocalLauncher().start(ServerArgs(save, load_models=("dlrm-onnx",))) as server:
        for protocol in ("http", "grpc"):
            client = TritonClient(server.endpoints.url(protocol), protocol)  # type: ignore[arg-type]
            served = client.infer("dlrm-onnx", {k: v.numpy() for k, v in inputs.items()})
            assert_parity(
                {"output": native},
                served,
                model="dlrm",
                backend="dlrm-onnx",
                protocol=protocol,
                fmt="onnx",
            )
            client.close()


@pytest.mark.triton
def test_check_flag_serves_and_compares(tmp_path: Path) -> None:
    # One instance, not the example's five: each is a python stub that imports torch to start
    # and takes its turn to stop (8 s of the test).
    out = run_deploy(
        "--ts-script",
        "--model",
        "mnist",
        "--save-dir",
        str(tmp_path),
        "--check",
        "--triton-engine-count",
        "1",
        "--",
        "--small",
    )
    assert "check http: parity ok" in out and "check grpc: parity ok" in out


@pytest.mark.triton
def test_a_torch_export_program_is_deployed_and_checked(tmp_path: Path) -> None:
    """PyTorch 2's format through deployer.py's flags: python-hosted, parity on both
    protocols (--aoti takes the same path and a compile: tests/models/test_zoo_pt2.py)."""
    out = run_deploy(
        "--torch-export",
        "--model",
        "mnist",
        "--save-dir",
        str(tmp_path),
        "--check",
        "--triton-engine-count",
        "1",
        "--",
        "--small",
    )
    assert "python backend hosting model.pt2" in out, out
    assert (tmp_path / "mnist" / "1" / "model.pt2").is_file()
    assert "check http: parity ok" in out and "check grpc: parity ok" in out


@pytest.mark.triton
def test_int8_is_quantized_and_checked_by_accuracy(tmp_path: Path) -> None:
    """--int8: the ONNX export quantized (static QDQ: the MNIST CNN has convolutions,
    calibrated on --calibration-data), and --check judges it by the cosine of its logits with
    fp32 PyTorch's instead of element-wise."""
    import onnx

    rng = np.random.default_rng(0)
    calibration = tmp_path / "calibration.npz"
    np.savez(calibration, input__0=rng.random((32, 1, 28, 28), dtype=np.float32))
    out = run_deploy(
        "--onnx",
        "--int8",
        "--calibration-data",
        str(calibration),
        "--model",
        "mnist",
        "--save-dir",
        str(tmp_path / "repo"),
        "--check",
        "--triton-engine-count",
        "1",
        "--",
        "--small",
    )
    assert "check http: accuracy ok" in out and "metric cosine[output__0]" in out, out
    assert "check grpc: accuracy ok" in out, out
    graph = onnx.load(str(tmp_path / "repo" / "mnist" / "1" / "model.onnx")).graph
    assert "QuantizeLinear" in {n.op_type for n in graph.node}


@pytest.mark.parametrize(
    ("flags", "model_args", "directory", "artifact"),
    [
        (["--ts-trace"], ["--config", "resnet50", "--small"], "resnet50", "model.pt"),
        (
            ["--ts-script", "--triton-model-name", "bert-ts"],
            ["--bert_model", "base", "--small"],
            "bert-ts",
            "model.pt",
        ),
        (["--onnx", "--model", "text_recognition"], ["--small"], "text_recognition", "model.onnx"),
    ],
)
def test_each_format_and_family(
    tmp_path: Path, flags: list[str], model_args: list[str], directory: str, artifact: str
) -> None:
    out = run_deploy(*flags, "--save-dir", str(tmp_path), "--", *model_args)
    assert (tmp_path / directory / "1" / artifact).is_file(), out
    assert (tmp_path / directory / "config.pbtxt").is_file()


def test_scheduling_flags_become_config_fields(tmp_path: Path) -> None:
    run_deploy(
        "--onnx",
        "--config-only",
        "--native",
        "--triton-model-name",
        "d",
        "--triton-model-version",
        "3",
        "--triton-max-batch-size",
        "2048",
        "--triton-dyn-batching-delay",
        "2.5",
        "--triton-engine-count",
        "2",
        "--save-dir",
        str(tmp_path),
        "--",
        *SMALL_DLRM,
    )
    config = pbtxt.read_config(tmp_path / "d" / "config.pbtxt")
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 2048
    assert config.dynamic_batching.max_queue_delay_microseconds == 2500
    assert config.instance_group[0].count == 2
    for static in ("0", "-1"):
        run_deploy(
            "--onnx",
            "--config-only",
            "--triton-model-name",
            f"s{static}",
            "--triton-dyn-batching-delay",
            static,
            "--save-dir",
            str(tmp_path),
            "--",
            *SMALL_DLRM,
        )
        assert not pbtxt.read_config(tmp_path / f"s{static}" / "config.pbtxt").HasField(
            "dynamic_batching"
        )


def test_dump_perf_data_is_perf_analyzer_input_json(tmp_path: Path) -> None:
    out = run_deploy(
        "--onnx",
        "--config-only",
        "--triton-model-name",
        "dlrm-onnx",
        "--save-dir",
        str(tmp_path / "repo"),
        "--dump-perf-data",
        str(tmp_path / "perf"),
        "--",
        *SMALL_DLRM,
        "--batch_size",
        "3",
    )
    data = json.loads((tmp_path / "perf" / "dlrm-onnx.json").read_text())["data"]
    assert len(data) == 3
    assert data[0]["numerical_features"]["shape"] == [13]
    assert len(data[0]["categorical_features"]["content"]) == 26
    assert np.issubdtype(np.array(data[0]["categorical_features"]["content"]).dtype, np.integer)
    assert "perf_analyzer -m dlrm-onnx --input-data" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--trt", "--save-dir", "x", "--", "--config", "resnet50"],
            "--trt builds a TensorRT plan on a GPU",
        ),
        (
            ["--onnx", "--trt-fp16", "--save-dir", "x", "--", "--config", "resnet50"],
            "--trt-fp16 applies to --trt only",
        ),
        (["--onnx", "--save-dir", "x"], "cannot tell which model to deploy"),
        (
            ["--onnx", "--save-dir", "x", "--", "--embedding_dim", "32", "--small"],
            "DLRM arguments: last bottom MLP size 16 must equal embedding_dim 32",
        ),
        (
            ["--onnx", "--save-dir", "x", "--", "--dataset", "/nonexistent"],
            "--dataset /nonexistent: no model_size.json in it",
        ),
        (
            ["--ts-trace", "--int8", "--save-dir", "x", "--", "--small", "--embedding_dim", "16"],
            "--int8 applies to --onnx in fp32 only",
        ),
        (
            [
                "--onnx",
                "--calibration-data",
                "c.npz",
                "--save-dir",
                "x",
                "--",
                "--small",
                "--embedding_dim",
                "16",
            ],
            "--calibration-data calibrates an --int8 model: add --int8",
        ),
        (
            [
                "--onnx",
                "--int8",
                "--calibration-data",
                "none.npz",
                "--save-dir",
                "x",
                "--",
                "--small",
                "--embedding_dim",
                "16",
            ],
            "--calibration-data none.npz: no such file",
        ),
        (
            [
                "--onnx",
                "--triton-model-name",
                "a/b",
                "--save-dir",
                "x",
                "--",
                "--small",
                "--embedding_dim",
                "16",
            ],
            "not a valid Triton model directory name",
        ),
    ],
)
def test_bad_combinations_are_clear_errors(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _assert_refused(argv, message, capsys, tmp_path, monkeypatch)


def _assert_refused(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Exit 2, the message after triton-deploy's prefix, nothing exported."""
    monkeypatch.chdir(tmp_path)
    assert deploy_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("triton-deploy: error: ") and message in err, err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").rglob("*.onnx"))


# -- --spec: a stateful model or a pipeline of your own -----------------------------------------
@pytest.mark.triton
def test_a_sequence_spec_is_deployed_and_its_sequences_checked(tmp_path: Path) -> None:
    out = run_deploy(
        "--spec",
        "pytest_triton.models.streaming_gru:sequence_spec",
        "--save-dir",
        str(tmp_path),
        "--check",
    )
    config = pbtxt.read_config(tmp_path / "streaming_gru_direct" / "config.pbtxt")
    assert config.HasField("sequence_batching") and config.sequence_batching.HasField("direct")
    assert {c.name for c in config.sequence_batching.control_input} >= {"START", "END", "CORRID"}
    assert (tmp_path / "streaming_gru_direct" / "1" / "model.py").is_file()
    for protocol in ("http", "grpc"):
        assert f"check {protocol}: sequence parity ok: model 'streaming_gru_direct'" in out, out


def test_a_pipeline_spec_writes_its_steps_and_front_models(tmp_path: Path) -> None:
    out = run_deploy(
        "--spec", "tests.helpers.pipeline_models:classifier_pipeline", "--save-dir", str(tmp_path)
    )
    ensemble = pbtxt.read_config(tmp_path / "classify" / "config.pbtxt")
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [
        "classify_preprocess",
        "classify_model",
        "classify_postprocess",
    ]
    assert (tmp_path / "classify_bls" / "1" / "model.py").is_file()
    assert (tmp_path / "classify_bls_async" / "1" / "model.py").is_file()
    for step in ("preprocess", "model", "postprocess"):
        assert list((tmp_path / f"classify_{step}").rglob("model.pt")), step
        assert f"step {step!r}: classify_{step}" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--spec", "pytest_triton.models.streaming_gru:sequence_spec", "--onnx"],
            "--onnx: not taken with --spec",
        ),
        (
            ["--spec", "tests.helpers.pipeline_models:classifier_pipeline", "--ts-trace"],
            "is a pipeline: each step's format",
        ),
        (
            ["--spec", "tests.helpers.probe_models:probe_spec"],
            "returned ModelSpec: it must return a SequenceSpec",
        ),
        (
            ["--spec", "pytest_triton.models.streaming_gru:sequence_spec", "--", "--small"],
            "takes no model arguments",
        ),
        (
            ["--save-dir", "x"],
            "one of --ts-script, --ts-trace, --onnx, --trt, --torch-export, --aoti is required",
        ),
    ],
)
def test_bad_spec_deployments_are_clear_errors(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused as the zoo's bad combinations are: exit 2, the message, nothing exported."""
    _assert_refused(argv, message, capsys, tmp_path, monkeypatch)
