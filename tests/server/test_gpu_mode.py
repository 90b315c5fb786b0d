"""--triton-gpu on a machine without a GPU: everything that decides and checks a GPU run, under
this machine's real conditions (no GPU, a Docker engine without the nvidia runtime, onnxruntime
without its CUDA provider, CPU-only torch) and, for the branches it cannot reach, through the
pure functions that take the probed facts. The GPU run itself is `docs/gpu.md`'s recipe."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_triton import ConfigError, InstanceGroup, Repository
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.parity.compare import (
    DEFAULT_TOLERANCES,
    TOLERANCES,
    compare_outputs,
    tolerance_for,
)
from pytest_triton.repository import hosted_model, pbtxt
from pytest_triton.repository.reference import NativeModel, ieee_fp32
from pytest_triton.repository.variants import DEFAULT_GPU_WARMUP, plan_variants
from pytest_triton.repository.warmup import WARMUP_DIR, batch_sizes
from pytest_triton.server import gpu
from pytest_triton.server.choice import launcher_name
from pytest_triton.server.container import ContainerSettings
from pytest_triton.server.docker_engine import docker_sdk_problem
from pytest_triton.server.hosted_env import (
    NO_CUDA_PROVIDER,
    onnx_cuda_problem,
    stub_numpy_problem,
)
from pytest_triton.server.local import LocalLauncher, find_installation, server_environment
from tests.helpers.tiny_models import Scorer, scorer_spec

# This machine's real conditions; on a GPU machine the tests that need them skip, saying so.
NO_GPU = pytest.mark.skipif(
    gpu.visible_gpus().count > 0,
    reason="this machine has a GPU: the no-GPU path is tested on CPU machines",
)
CPU_TORCH = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="torch sees CUDA here: the CPU-only torch path is tested on CPU machines",
)
CPU_ORT = pytest.mark.skipif(
    onnx_cuda_problem() is None,
    reason="onnxruntime has its CUDA provider here: the missing-provider path is tested elsewhere",
)

SEEN = gpu.GpuVisibility(2, "test: 2 GPUs")
NONE = gpu.GpuVisibility(0, "test: no driver")
GPU_TARGET = ServerTarget(frozenset({"python"}), "KIND_GPU", onnx_gpu_problem=NO_CUDA_PROVIDER)


# -- which launcher runs a GPU server ------------------------------------------------------
@pytest.mark.parametrize(
    ("gpus", "docker", "expected"),
    [
        pytest.param(SEEN, None, "container", id="gpu+docker-nvidia"),
        pytest.param(
            SEEN, "Docker has no nvidia runtime", "local", id="gpu+docker-without-runtime"
        ),
        pytest.param(SEEN, "no Docker engine answers", "local", id="gpu+no-engine"),
        pytest.param(SEEN, "the Docker SDK is not installed", "local", id="gpu+no-sdk"),
    ],
)
def test_auto_prefers_the_container_then_a_local_server(
    gpus: gpu.GpuVisibility, docker: str | None, expected: str
) -> None:
    assert gpu.choose_launcher(gpus, docker) == expected


@pytest.mark.parametrize("docker", [None, "Docker has no nvidia runtime"])
def test_auto_without_a_gpu_names_the_gpu_not_docker(docker: str | None) -> None:
    with pytest.raises(ConfigError) as info:
        gpu.choose_launcher(NONE, docker)
    assert "--triton-gpu needs an NVIDIA GPU, and none is visible here (test: no driver)" in str(
        info.value
    )
    assert "Docker" not in str(info.value)


@NO_GPU
def test_this_machine_sees_no_gpu() -> None:
    seen = gpu.visible_gpus()
    assert seen.count == 0, seen
    assert "no NVIDIA driver" in seen.evidence


def test_gpu_visibility_from_driver_entries_device_nodes_and_cuda_visible_devices(
    tmp_path: Path,
) -> None:
    proc, dev = tmp_path / "gpus", tmp_path / "dev"
    proc.mkdir()
    dev.mkdir()
    (dev / "nvidiactl").touch()  # not a GPU
    assert gpu.visible_gpus({"PATH": ""}, proc, dev).count == 0
    for node in ("nvidia0", "nvidia1"):
        (dev / node).touch()
    assert gpu.visible_gpus({}, proc, dev) == gpu.GpuVisibility(
        2, f"{dev}/nvidia* has 2 device node(s)"
    )
    for bus in ("0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"):
        (proc / bus).mkdir()
    assert gpu.visible_gpus({}, proc, dev).count == 3
    assert gpu.visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}, proc, dev).count == 1
    hidden = gpu.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, proc, dev)
    assert hidden.count == 0 and "hides every GPU" in hidden.evidence


def test_gpu_ordinals_that_do_not_exist_are_named() -> None:
    gpu.check_gpu_ordinals("all", SEEN)
    gpu.check_gpu_ordinals("0,1", SEEN)
    with pytest.raises(
        ConfigError,
        match=r"--triton-gpus 1,3: GPU\(s\) \[3\] do not exist; "
        r"this machine has 2 \(0..1; test: 2 GPUs\)",
    ):
        gpu.check_gpu_ordinals("1,3", SEEN)


# -- preflight of each launcher, on this machine ----------------------------------------------
@NO_GPU
def test_auto_and_local_preflight_name_the_missing_gpu() -> None:
    for config in (resolve(gpu=True), resolve(gpu=True, launcher="local")):
        with pytest.raises(ConfigError, match="--triton-gpu needs an NVIDIA GPU"):
            launcher_name(config)


@NO_GPU
def test_container_preflight_names_what_docker_lacks() -> None:
    problem = gpu.docker_gpu_problem()
    assert problem is not None and any(
        text in problem
        for text in ("Docker has no nvidia runtime", "no Docker engine answers", "the Docker SDK")
    ), problem
    with pytest.raises(ConfigError) as info:
        launcher_name(resolve(gpu=True, launcher="container"))
    assert str(info.value) == problem


@CPU_TORCH
def test_external_preflight_checks_the_references_cuda() -> None:
    with pytest.raises(
        ConfigError,
        match=r"torch .*\(a CPU-only build\) sees no CUDA device: "
        "install a CUDA build of torch",
    ):
        launcher_name(resolve(gpu=True, url="http://127.0.0.1:8000"))


def test_a_docker_folder_is_not_taken_for_the_docker_sdk(tmp_path: Path) -> None:
    """A checkout's own docker/ folder imports as a namespace package when the SDK is missing."""
    (tmp_path / "docker").mkdir()
    spec = importlib.machinery.PathFinder.find_spec("docker", [str(tmp_path)])
    assert spec is not None
    folder = importlib.util.module_from_spec(spec)
    problem = docker_sdk_problem(folder)
    assert problem is not None
    assert f"not the Docker SDK but the folder {tmp_path / 'docker'}" in problem
    assert "pip install 'pytest-triton[container]'" in problem
    assert docker_sdk_problem(None) == (
        "the Docker SDK is not installed: pip install 'pytest-triton[container]'"
    )
    import docker

    assert docker_sdk_problem(docker) is None


# -- the bundled stub's numpy ----------------------------------------------------------------
def test_stub_numpy_check_passes_this_environment() -> None:
    env = server_environment(find_installation())
    assert stub_numpy_problem(env) is None


def test_stub_numpy_check_names_interpreter_version_and_fix(numpy2_bin: Path) -> None:
    env = server_environment(find_installation())
    env["PATH"] = os.pathsep.join([str(numpy2_bin), env["PATH"]])
    problem = stub_numpy_problem(env)
    assert problem is not None
    python = numpy2_bin / "python3"
    assert f"takes its packages from {python}" in problem
    assert "which has numpy 2." in problem
    assert "answers every request with empty outputs" in problem
    assert f"{python} -m pip install 'numpy<2'" in problem


# -- ONNX on a GPU: the CUDA provider or not offered ----------------------------------------
@CPU_ORT
def test_this_onnxruntime_has_no_cuda_provider() -> None:
    assert onnx_cuda_problem() == NO_CUDA_PROVIDER


@CPU_ORT
def test_hosted_onnx_is_not_offered_on_a_gpu_without_the_cuda_provider() -> None:
    target = LocalLauncher(gpus="all").target()
    assert target.gpu and target.onnx_gpu_problem == NO_CUDA_PROVIDER
    plan = plan_variants(
        [scorer_spec()], ("torchscript-script", "torchscript-trace", "onnx"), target
    )
    assert [v.id for v in plan.variants] == [
        "scorer-torchscript-script-hosted-gpu",
        "scorer-torchscript-trace-hosted-gpu",
    ]
    assert [(u.id, u.reason) for u in plan.unavailable] == [
        ("scorer-onnx-gpu", "onnxruntime has no CUDAExecutionProvider: install onnxruntime-gpu")
    ]
    # a spec that asks for CPU instances keeps its ONNX variant, on the CPU, id unchanged
    cpu_spec = scorer_spec(instance_group=InstanceGroup(kind="KIND_CPU"))
    assert [v.id for v in plan_variants([cpu_spec], ("onnx",), target).variants] == [
        "scorer-onnx-hosted"
    ]


def test_a_local_gpu_server_without_tensorrt_says_where_to_get_it() -> None:
    plan = plan_variants(
        [scorer_spec()], ("tensorrt", "onnx-trt"), LocalLauncher(gpus="0").target()
    )
    reasons = {u.id: u.reason for u in plan.unavailable}
    assert reasons["scorer-tensorrt-gpu"].endswith(
        "has no tensorrt backend: run inside an NGC image with --triton-executable "
        "/opt/tritonserver/bin/tritonserver, or use --triton-launcher container"
    )
    assert reasons["scorer-onnx-trt-gpu"].endswith(
        "onnxruntime backend, which this one lacks (an NGC image has it)"
    )


def test_cpu_ids_are_unchanged() -> None:
    plan = plan_variants([scorer_spec(fp16=True)], ("onnx",), ServerTarget())
    assert [v.id for v in plan.variants] == ["scorer-onnx-hosted", "scorer-onnx-fp16-hosted"]


@CPU_ORT
@CPU_TORCH
def test_hosted_model_refuses_a_gpu_it_cannot_use() -> None:
    """hosted_model.py's device check, with this machine's real onnxruntime and torch."""
    assert hosted_model.device_problem("onnx", False, 0) is None
    assert hosted_model.device_problem("torchscript", False, 0) is None
    onnx = hosted_model.device_problem("onnx", True, 0)
    assert onnx is not None and onnx.startswith(
        f"KIND_GPU instance on GPU 0, but the stub's Python ({sys.prefix}) has onnxruntime"
    )
    assert onnx.endswith("onnxruntime has no CUDAExecutionProvider: install onnxruntime-gpu")
    ts = hosted_model.device_problem("torchscript", True, 1)
    assert ts is not None and f"has torch {torch.__version__}, which sees no CUDA device" in ts


# -- numerics and tolerances --------------------------------------------------------------
def test_tolerances_by_format_dtype_device_and_numerics() -> None:
    fp32 = DEFAULT_TOLERANCES["FP32"]
    for fmt in ("torchscript-script", "torchscript-trace", "onnx"):
        assert tolerance_for(fmt, np.float32) == fp32
        assert tolerance_for(fmt, np.float32, "gpu", "strict") == fp32
        production = tolerance_for(fmt, np.float32, "gpu", "production")
        assert (production.rtol, production.atol) == (1e-3, 1e-3)
        assert "TF32" in production.reason and "5.9e-4" in production.reason
        assert tolerance_for(fmt, np.float32, "cpu", "production") == fp32  # no TF32 on a CPU
    assert tolerance_for("onnx", np.float16).atol == 2e-3  # measured 1.46e-3 on a CPU
    assert tolerance_for("onnx", np.float16, "gpu") == tolerance_for("onnx", np.float16)
    assert tolerance_for("torchscript-trace", np.float16, "gpu", "strict").rtol == 1e-2
    assert tolerance_for("tensorrt", np.float32, "gpu", "strict").rtol == 1e-3
    assert tolerance_for("onnx", np.int64, "gpu", "production").atol == 0.0


def test_every_widened_tolerance_says_why_and_what_was_measured() -> None:
    for key, tolerance in TOLERANCES.items():
        assert tolerance.reason, key
        if key[2] != "cpu":  # applies on GPUs: the H100 figure, or says it is owed
            assert "H100" in tolerance.reason or "not yet measured" in tolerance.reason, key


def test_an_empty_served_output_is_named_as_such() -> None:
    native = {"logits": np.ones((3, 10), np.float32)}
    report = compare_outputs(native, {"logits": np.empty(0, np.float32)})
    assert not report.ok
    assert report.diffs[0].problem.startswith(
        "served output is EMPTY (0 elements) where PyTorch's has 30 (shape (3, 10))"
    )
    assert "numpy >= 2" in report.describe()


def test_numerics_settings_reach_both_server_kinds() -> None:
    install = find_installation()
    base = {"PATH": "/usr/bin", "NVIDIA_TF32_OVERRIDE": "1", "CUDA_VISIBLE_DEVICES": "0,1,2"}
    strict = server_environment(install, gpus="2", numerics="strict", base=base)
    assert strict["NVIDIA_TF32_OVERRIDE"] == "0" and strict["CUDA_VISIBLE_DEVICES"] == "2"
    production = server_environment(install, gpus="all", numerics="production", base=base)
    assert "NVIDIA_TF32_OVERRIDE" not in production
    assert production["CUDA_VISIBLE_DEVICES"] == "0,1,2"  # all: what this process may use
    assert ContainerSettings.from_config(resolve(gpu=True)).environment == {
        "NVIDIA_TF32_OVERRIDE": "0"
    }
    assert ContainerSettings.from_config(resolve(gpu=True, numerics="production")).environment == {}


def test_gpu_settings_parse_and_no_longer_force_a_container() -> None:
    config = resolve(
        gpu=True, gpus=" 1, 0 ", numerics="production", warmup="2", precisions="fp16,fp32"
    )
    assert (
        config.server.launcher,
        config.server.gpus,
        config.server.numerics,
        config.serving.warmup,
        config.serving.precisions,
    ) == (
        "auto",
        "1,0",
        "production",
        2,
        ("fp16", "fp32"),
    )
    assert resolve(gpu=True, launcher="local").server.launcher == "local"
    assert resolve().server.launcher == "local" and resolve().serving.warmup is None
    for bad, message in (
        (dict(gpus="first"), "expected all or a comma list of GPU ordinals"),
        (dict(numerics="fast"), "'fast' is not one of strict, production"),
        (dict(warmup="-1"), "expected an integer >= 0"),
        (dict(precisions="int4"), "unknown precision(s) ['int4']"),
    ):
        with pytest.raises(
            ConfigError,
            match=message.replace("(", r"\(")
            .replace(")", r"\)")
            .replace("[", r"\[")
            .replace("]", r"\]"),
        ):
            resolve(**bad)


def test_precisions_setting_adds_fp16_variants() -> None:
    plan = plan_variants(
        [scorer_spec()], ("onnx", "torchscript-trace"), ServerTarget(), precisions=("fp32", "fp16")
    )
    assert [v.id for v in plan.variants] == [
        "scorer-onnx-hosted",
        "scorer-onnx-fp16-hosted",
        "scorer-torchscript-trace-hosted",
        "scorer-torchscript-trace-fp16-hosted",
    ]
    only = plan_variants([scorer_spec(fp16=True)], ("onnx",), ServerTarget(), precisions=["fp32"])
    assert [v.id for v in only.variants] == ["scorer-onnx-hosted"]


# -- warm-up --------------------------------------------------------------------------------
def test_warmup_defaults_on_for_gpu_servers_only() -> None:
    def runs(
        target: ServerTarget, spec_warmup: int | None = None, setting: int | None = None
    ) -> int:
        (variant,) = plan_variants(
            [scorer_spec(warmup=spec_warmup)], ("onnx",), target, warmup=setting
        ).variants
        return variant.warmup

    cpu, gpu_target = ServerTarget(), ServerTarget(instance_kind="KIND_GPU")
    assert (runs(cpu), runs(gpu_target)) == (0, DEFAULT_GPU_WARMUP)
    assert (runs(cpu, setting=2), runs(gpu_target, setting=0)) == (2, 0)
    assert runs(gpu_target, spec_warmup=1, setting=0) == 1


def test_warmup_config_and_sample_files(tmp_path: Path) -> None:
    repo = Repository(tmp_path, [scorer_spec(warmup=3, fp16=True)], formats=["onnx"])
    fp32, fp16 = repo.plan(ServerTarget())
    assert batch_sizes(fp32.spec) == (1, 4)
    config = repo.config(fp32)
    assert [(w.name, w.batch_size, w.count) for w in config.model_warmup] == [
        ("scorer_sample_batch_1", 1, 3),
        ("scorer_sample_batch_4", 4, 3),
    ]
    inputs = config.model_warmup[0].inputs
    assert (inputs["x"].data_type, list(inputs["x"].dims), inputs["x"].input_data_file) == (
        pbtxt.mc.TYPE_FP32,
        [4],
        "x",
    )
    assert (inputs["idx"].data_type, list(inputs["idx"].dims)) == (pbtxt.mc.TYPE_INT64, [2])
    assert "model_warmup {" in pbtxt.to_text(config)
    row = scorer_spec().make_inputs(1, seed=0)
    for variant, dtype in ((fp32, np.float32), (fp16, np.float16)):
        directory = repo.ensure(variant)
        written = pbtxt.read_config(directory / "config.pbtxt")
        assert written.model_warmup == repo.config(variant).model_warmup
        x = np.fromfile(directory / WARMUP_DIR / "x", dtype=dtype)
        np.testing.assert_array_equal(x, row["x"][0].astype(dtype))
        idx = np.fromfile(directory / WARMUP_DIR / "idx", dtype=np.int64)
        np.testing.assert_array_equal(idx, row["idx"][0])
        assert f"file:{WARMUP_DIR}/x" in repo.files(variant)  # uploads carry them too
    with pytest.raises(Exception, match="warmup must be None or an integer >= 0"):
        scorer_spec(warmup=-1).validate()


def test_no_warmup_no_files(tmp_path: Path) -> None:
    repo = Repository(tmp_path, [scorer_spec()], formats=["onnx"])
    (variant,) = repo.plan(ServerTarget())
    assert not repo.config(variant).model_warmup
    assert not (repo.ensure(variant) / WARMUP_DIR).exists()


# -- the reference --------------------------------------------------------------------------
def _state(module: torch.nn.Module) -> list[tuple[str, torch.device, torch.dtype, int]]:
    return [
        (name, t.device, t.dtype, t.data_ptr())
        for name, t in [*module.named_parameters(), *module.named_buffers()]
    ]


def test_references_never_move_or_cast_the_users_module() -> None:
    user = Scorer().eval()
    before = _state(user)
    values = {k: v.clone() for k, v in user.state_dict().items()}
    spec = scorer_spec(module=user)
    cpu = NativeModel(spec, "fp32", "cpu")
    assert cpu.module is user  # nothing to copy
    other_device = NativeModel(spec, "fp32", "meta")  # a real move, without a GPU
    half = NativeModel(spec, "fp16", "cpu")
    assert other_device.module is not user and half.module is not user
    assert {t.device.type for t in other_device.module.parameters()} == {"meta"}
    assert {t.dtype for t in half.module.parameters()} == {torch.float16}
    assert _state(user) == before
    for key, value in user.state_dict().items():
        assert torch.equal(value, values[key]), key
    inputs = spec.make_inputs(4)
    out32, out16 = cpu(inputs), half(inputs)  # both references coexist and answer
    assert out32["score"].dtype == np.float32 and out16["score"].dtype == np.float16
    np.testing.assert_allclose(out16["score"].astype(np.float32), out32["score"], atol=5e-3)


class _Flags(torch.nn.Module):
    """Records the TF32 settings in force while the reference runs."""

    seen: list[object] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _Flags.seen.append(_tf32_settings())
        return x + 1


def _tf32_settings() -> object:
    backends = torch.backends
    if hasattr(backends.cuda.matmul, "fp32_precision"):
        return (
            backends.cuda.matmul.fp32_precision,
            backends.cudnn.conv.fp32_precision,
            backends.cudnn.rnn.fp32_precision,
        )
    return (backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32)


def test_the_reference_runs_without_tf32_and_restores_the_settings() -> None:
    before = _tf32_settings()
    spec = scorer_spec(
        module=_Flags(),
        inputs=["x"],
        outputs=["y"],
        example_inputs={"x": torch.zeros(2, 4)},
        input_factory=None,
    )
    _Flags.seen.clear()
    NativeModel(spec)({"x": np.zeros((2, 4), np.float32)})
    strict = (
        ("ieee", "ieee", "ieee")
        if isinstance(before, tuple) and len(before) == 3
        else (False, False)
    )
    assert _Flags.seen == [strict]
    assert _tf32_settings() == before
    with ieee_fp32():
        assert _tf32_settings() == strict
    assert _tf32_settings() == before
