"""What GPU mode changes on a real server, proven with the bundled tritonserver on the CPU: the
environment reaches the server's python stubs, Triton's model_warmup runs from the samples the
spec gives, and a stub under numpy 2 answers empty outputs that parity names as such."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from pytest_triton import Repository, TritonClient
from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import resolve
from pytest_triton.parity.compare import compare_outputs
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.hosted_env import stub_numpy_problem
from pytest_triton.server.launcher import wait_until_ready
from pytest_triton.server.local import LocalServer, server_environment
from pytest_triton.session.lifecycle import start_deployment
from tests.helpers.interpreters import index_problem
from tests.helpers.raw_models import write_python_model
from tests.helpers.tiny_models import scorer_spec

pytestmark = pytest.mark.triton

EXPECT_ENV = """
        import os
        seen = {{k: os.environ.get(k) for k in ("NVIDIA_TF32_OVERRIDE", "CUDA_VISIBLE_DEVICES")}}
        if seen != {expected!r}:
            raise RuntimeError(f"stub environment {{seen}}")"""


@pytest.mark.parametrize(
    ("launcher", "expected"),
    [
        pytest.param(
            dict(gpus="1", numerics="strict"),
            {"NVIDIA_TF32_OVERRIDE": "0", "CUDA_VISIBLE_DEVICES": "1"},
            id="strict-gpu1",
        ),
        pytest.param(
            dict(numerics="production"),
            {"NVIDIA_TF32_OVERRIDE": None, "CUDA_VISIBLE_DEVICES": None},
            id="production",
        ),
    ],
)
def test_numerics_and_gpus_reach_the_python_stub(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    launcher: dict[str, str],
    expected: dict[str, str | None],
) -> None:
    """The model loads only if its stub process sees exactly the expected environment."""
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")  # a user's setting production must drop
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    write_python_model(tmp_path, "env_check", initialize=EXPECT_ENV.format(expected=expected))
    with LocalLauncher(**launcher).start(ServerArgs(tmp_path, startup_timeout_s=60)) as server:
        client = TritonClient(server.endpoints.url("http"), "http")
        try:
            client.load_model("env_check")  # raises with the stub's RuntimeError otherwise
            assert client.is_model_ready("env_check")
        finally:
            client.close()


def test_warmup_runs_before_the_model_serves_and_parity_holds(tmp_path: Path) -> None:
    """model_warmup from the spec's samples: Triton runs it while loading (the statistics count
    it before any request of ours), then parity and batched parity hold on the warm model."""
    spec = scorer_spec(warmup=3)
    repo = Repository(tmp_path, [spec], formats=["torchscript-trace"])
    deployment = start_deployment(resolve(), repo)
    try:
        (variant,) = repo.variants
        served = deployment.model(variant)
        for protocol in ("http", "grpc"):
            client = deployment.client(protocol)
            if protocol == "http":
                stats = client.statistics(served.name)["model_stats"][0]
                # batch sizes 1 and 4, three runs each: 6 executions of 15 samples
                assert (stats["execution_count"], stats["inference_count"]) == (6, 15), stats
                assert sorted(
                    (b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]
                ) == [(1, 3), (4, 3)]
            served.assert_parity(client, batch_size=4)
            served.assert_batched_parity(client, requests=8)
    finally:
        deployment.close()
        repo.remove()


def test_without_a_package_index_the_numpy2_venv_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where numpy 2 must be downloaded and no index answers (the GPU machine), the tests that
    need it skip with the reason rather than error: pip's index, made unreachable here."""
    for name in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    problem = index_problem(Path(sys.executable))
    assert problem is not None and "package index is not reachable" in problem, problem


def test_numpy2_stub_answers_empty_outputs_that_parity_names(numpy2_bin: Path) -> None:
    """The real failure: the bundled stub with numpy >= 2 first on its PATH answers every
    request with no data. The client hands back an empty array (not tritonclient's reshape
    error), parity says so, and the stub check names this exact environment."""
    launcher = LocalLauncher()
    env = server_environment(launcher.install)
    env["PATH"] = os.pathsep.join([str(numpy2_bin), env["PATH"]])
    assert stub_numpy_problem(env) is not None
    root = Path(tempfile.mkdtemp(prefix="pytest-triton-numpy2-"))
    write_python_model(root, "add_one")
    workdir = Path(tempfile.mkdtemp(prefix=f"pytest-triton-server-{os.getpid()}-"))
    server = LocalServer(
        launcher.install, ServerArgs(root, model_control_mode="none"), workdir, env=env
    )
    try:
        wait_until_ready(server, 60)
        x = np.ones((3, 4), np.float32)
        for protocol in ("http", "grpc"):
            client = TritonClient(server.endpoints.url(protocol), protocol)
            try:
                answer = client.infer("add_one", {"X": x}, ["Y"])
            finally:
                client.close()
            assert answer["Y"].size == 0, (protocol, answer)
            report = compare_outputs({"Y": x + 1}, answer)
            assert (
                "served output is EMPTY (0 elements) where PyTorch's has 12 (shape (3, 4))"
                in report.describe()
            ), (protocol, report.describe())
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.gpu
def test_hosted_torchscript_runs_on_the_gpu_and_matches(
    triton_config: TritonConfig, tmp_path: Path
) -> None:
    """On a GPU (run with --triton-gpu, docs/gpu.md): the variant's id says -gpu, Triton puts
    its instance on a GPU device, and parity holds in the session's numerics, warm."""
    config = triton_config.with_overrides({"server_args": ("--log-info=true",)})
    repo = Repository(tmp_path / "repo", [scorer_spec()], formats=["torchscript-trace"])
    deployment = start_deployment(config, repo)
    try:
        (variant,) = repo.variants
        assert variant.id == "scorer-torchscript-trace-hosted-gpu" and variant.warmup > 0
        served = deployment.model(variant)
        assert "(GPU device" in deployment.server.log_text(), deployment.server.log_tail()
        for protocol in config.client.protocols:
            served.assert_parity(deployment.client(protocol), batch_size=4)
            served.assert_batched_parity(deployment.client(protocol))
    finally:
        deployment.close()
