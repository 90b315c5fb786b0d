"""--triton-gpu on Locust and triton-perf: the same preflight as pytest (a machine without a GPU
stops at once, naming it, before any export), and the format a load test serves by default
chosen from what the server can serve on its device. The GPU run itself is `make gpu-proof`."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.load.runner.embedded import (
    EmbeddedModel,
    check_gpu_host,
    served_format,
)
from pytest_triton.load.tune.trials import gpu_formats
from pytest_triton.repository.variants import LOAD_FORMATS, check_servable, default_format
from pytest_triton.server import gpu
from pytest_triton.server.hosted_env import NO_CUDA_PROVIDER
from tests.helpers.locust_runs import LOCUSTFILES, REPO, subprocess_env

NO_GPU = pytest.mark.skipif(
    gpu.visible_gpus().count > 0,
    reason="this machine has a GPU: the no-GPU preflight is tested on CPU machines",
)
CPU = ServerTarget(frozenset({"python"}))
BUNDLED_GPU = ServerTarget(frozenset({"python"}), "KIND_GPU", onnx_gpu_problem=NO_CUDA_PROVIDER)
ORT_GPU = ServerTarget(frozenset({"python"}), "KIND_GPU")  # onnxruntime-gpu in the stub


def test_the_default_format_is_the_first_the_server_serves_on_its_device() -> None:
    assert LOAD_FORMATS[0] == "onnx"
    assert default_format(CPU) == "onnx"
    assert default_format(ORT_GPU) == "onnx"
    # the bundled server on a GPU: onnxruntime has no CUDA provider there
    assert default_format(BUNDLED_GPU) == "torchscript-trace"
    with pytest.raises(ConfigError, match=r"can serve none of onnx on its GPU: onnx: .*CUDA"):
        default_format(BUNDLED_GPU, ("onnx",))


def test_a_named_format_the_server_cannot_serve_is_refused_with_the_reason() -> None:
    assert check_servable("torchscript-script", BUNDLED_GPU) == "torchscript-script"
    with pytest.raises(ConfigError) as refused:
        check_servable("onnx", BUNDLED_GPU)
    text = str(refused.value)
    assert "'onnx' cannot be served by this server on its GPU" in text
    assert "onnxruntime has no CUDAExecutionProvider" in text
    assert "it can serve torchscript-script, torchscript-trace" in text
    with pytest.raises(ConfigError, match=r"tensorrt.*on its CPU: TensorRT plans need a GPU"):
        check_servable("tensorrt", CPU)
    with pytest.raises(ConfigError, match="unknown export format 'savedmodel'"):
        check_servable("savedmodel", CPU)


def test_on_the_cpu_the_format_is_the_runs_or_each_models_own_without_asking_a_server() -> None:
    model = EmbeddedModel(lambda: pytest.fail("no spec is built to choose a format"))
    assert model.fmt is None and model.format == "onnx"
    assert served_format(resolve(), [model]) is None
    assert served_format(resolve(format="torchscript-trace"), [model]) == "torchscript-trace"


def test_gpu_with_a_given_server_is_refused() -> None:
    check_gpu_host(resolve(gpu=True), None, "--host")  # the server started here: fine
    check_gpu_host(resolve(), "http://127.0.0.1:8000", "--host")
    with pytest.raises(ConfigError, match="leave out --triton-gpu \\(or --url\\)"):
        check_gpu_host(resolve(gpu=True), "http://127.0.0.1:8000", "--url")


@NO_GPU
def test_locust_and_triton_perf_stop_at_once_naming_the_missing_gpu() -> None:
    """Real processes, as users start them: Locust with TRITON_GPU=1 (once silently served on
    the CPU), triton-perf with --triton-gpu; both exit 2 before exporting anything."""
    runs = {
        "locust": subprocess.Popen(
            [
                *(sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / "dlrm.py")),
                *("--headless", "-t", "5s", "--triton-gpus", "0"),
                *("--triton-numerics", "production"),
            ],
            env=subprocess_env(TRITON_GPU="1"),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        "triton-perf": subprocess.Popen(
            [sys.executable, "-m", "pytest_triton.cli.triton_perf", "-m", "dlrm", "--triton-gpu"],
            env=subprocess_env(),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
    }
    started = time.monotonic()
    for name, proc in runs.items():
        try:
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 2, (name, out[-2000:])
        assert "--triton-gpu needs an NVIDIA GPU, and none is visible here" in out, (name, out)
        assert "export" not in out.lower(), (name, out[-2000:])  # stopped before any export
        assert "Traceback" not in out, (name, out[-2000:])
    assert time.monotonic() - started < 120


@NO_GPU
def test_triton_tune_chooses_its_gpu_formats_after_the_preflight() -> None:
    """Asked or not, the formats on a GPU come from what its server offers: the launcher's
    preflight runs first, so a machine without a GPU is told so before any export."""
    config = resolve(gpu=True)
    for asked in ((), ("onnx",), ("torchscript-trace",)):
        with pytest.raises(ConfigError, match=r"cannot use the GPU launcher here: .*NVIDIA GPU"):
            gpu_formats(config, asked)


def test_pytest_refuses_triton_gpu_in_its_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest reads its command line and ini file: TRITON_GPU=1 would be silently a CPU run,
    so the session stops naming the variable and the flag to use."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv("TRITON_GPU", "1")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*TRITON_GPU is set, but pytest reads no TRITON_* variables: pass --triton-gpu*"]
    )
