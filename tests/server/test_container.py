"""The container launcher: settings a GPU host gets (checked exactly, no GPU needed) and real
containers from the offline CPU image (needs Docker: `.ci/docker-engine`,
`images/build-cpu-image`)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from docker.types import DeviceRequest, Ulimit

from pytest_triton import ConfigError, ModelLoadError, Repository, ServerError, TritonClient
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.repository import pbtxt
from pytest_triton.server import ServerArgs
from pytest_triton.server.container import (
    CPU_IMAGE,
    NGC_BACKENDS,
    NGC_IMAGE,
    OWNER_LABEL,
    ContainerLauncher,
    ContainerSettings,
    command,
    reap_orphan_containers,
)
from pytest_triton.server.tensorrt import plan_problem
from tests.helpers.containers import docker_or_skip, our_containers
from tests.helpers.interrupts import default_sigint
from tests.helpers.raw_models import write_python_model
from tests.helpers.session_output import failure_text
from tests.helpers.tiny_models import scorer_spec

REPO_ROOT = Path(__file__).resolve().parents[2]


# -- GPU settings, exactly as a GPU host would get them ------------------------------------
def test_gpu_settings_follow_the_seeds_docker_run_flags() -> None:
    settings = ContainerSettings.from_config(resolve(gpu=True, gpus="0,1"))
    assert settings.image == NGC_IMAGE and settings.backends == NGC_BACKENDS
    kwargs = settings.run_kwargs()
    assert settings.host_shm and "shm_size" not in kwargs  # the host's /dev/shm is mounted
    assert kwargs["ulimits"] == [
        Ulimit(name="memlock", soft=-1, hard=-1),
        Ulimit(name="stack", soft=67108864, hard=67108864),
    ]
    assert kwargs["device_requests"] == [
        DeviceRequest(device_ids=["0", "1"], capabilities=[["gpu"]])
    ]
    assert kwargs["labels"] == {OWNER_LABEL: str(os.getpid())}
    everything = ContainerSettings.from_config(resolve(gpu=True)).run_kwargs()
    assert everything["device_requests"] == [DeviceRequest(count=-1, capabilities=[["gpu"]])]


def test_cpu_image_settings_have_no_gpu_flags() -> None:
    settings = ContainerSettings.from_config(resolve(launcher="container"))
    assert settings.image == CPU_IMAGE and settings.backends == frozenset({"python"})
    assert set(settings.run_kwargs()) == {"init", "labels"}
    image = ContainerSettings.from_config(
        resolve(launcher="container", image="nvcr.io/nvidia/tritonserver:25.01-py3")
    )
    assert image.backends == NGC_BACKENDS and image.gpus is None


def test_server_command_inside_the_container() -> None:
    args = ServerArgs(
        Path("/host/repo"),
        model_control_mode="explicit",
        log_verbose=1,
        extra_args=("--pinned-memory-pool-byte-size=0",),
    )
    assert command(args) == [
        "tritonserver",
        "--model-repository=/models",
        "--model-control-mode=explicit",
        "--http-address=0.0.0.0",
        "--http-port=8000",
        "--grpc-address=0.0.0.0",
        "--grpc-port=8001",
        "--metrics-address=0.0.0.0",
        "--metrics-port=8002",
        "--exit-timeout-secs=10",
        "--log-verbose=1",
        "--strict-readiness=true",
        "--pinned-memory-pool-byte-size=0",
    ]


def test_gpu_mode_adds_tensorrt_formats_unless_formats_are_given() -> None:
    assert resolve(gpu=True).serving.formats == (
        "torchscript-script",
        "torchscript-trace",
        "onnx",
        "tensorrt",
        "onnx-trt",
    )
    assert resolve(gpu=True, formats="onnx").serving.formats == ("onnx",)


def _gpu_config(tmp_path: Path, fmt: str, **spec: Any) -> str:
    repo = Repository(tmp_path, [scorer_spec(formats=[fmt], **spec)])
    (variant,) = repo.plan(ServerTarget(NGC_BACKENDS, "KIND_GPU", tensorrt_problem=None))
    assert not variant.hosted
    return pbtxt.to_text(pbtxt.model_config(variant, repo.signature(variant.spec)))


@pytest.mark.parametrize(
    ("fmt", "platform"),
    [
        ("onnx", 'platform: "onnxruntime_onnx"'),
        ("torchscript-trace", 'platform: "pytorch_libtorch"'),
        ("tensorrt", 'platform: "tensorrt_plan"'),
    ],
)
def test_gpu_configs_use_native_backends_on_gpu_instances(
    tmp_path: Path, fmt: str, platform: str
) -> None:
    text = _gpu_config(tmp_path, fmt)
    assert platform in text
    assert "instance_group {\n  count: 1\n  kind: KIND_GPU\n}" in text
    assert "backend:" not in text and "artifact" not in text


def test_onnx_tensorrt_accelerator_config(tmp_path: Path) -> None:
    text = _gpu_config(tmp_path, "onnx-trt")
    assert 'platform: "onnxruntime_onnx"' in text
    assert (
        "optimization {\n  execution_accelerators {\n    gpu_execution_accelerator {\n"
        '      name: "tensorrt"\n'
    ) in text
    assert 'key: "precision_mode"\n        value: "FP16"' in text


def test_fp16_variants_take_half_inputs(tmp_path: Path) -> None:
    repo = Repository(tmp_path, [scorer_spec(formats=["onnx"], fp16=True)])
    variants = repo.plan(ServerTarget(NGC_BACKENDS, "KIND_GPU", tensorrt_problem=None))
    assert [v.id for v in variants] == ["scorer-onnx-native-gpu", "scorer-onnx-fp16-native-gpu"]
    config = pbtxt.model_config(variants[1], repo.signature(variants[1].spec))
    assert config.name == "scorer_onnx_fp16"
    types = [(t.name, pbtxt.mc.DataType.Name(t.data_type)) for t in config.input]
    assert types == [("x", "TYPE_FP16"), ("idx", "TYPE_INT64")]


def test_tensorrt_version_check_says_what_to_install() -> None:
    image = NGC_IMAGE
    assert plan_problem(image, "10.5.0.18", "10.5.0") is None
    assert "pip install tensorrt==10.5.0" in str(plan_problem(image, None, "10.5.0"))
    mismatch = str(plan_problem(image, "10.7.0", "10.5.0"))
    assert (
        "tensorrt 10.7.0 is installed but" in mismatch and "loads only in the TensorRT" in mismatch
    )
    assert "no TensorRT library found" in str(plan_problem("busybox", "10.5.0", None))


def test_tensorrt_variant_is_skipped_with_its_reason_on_cpu(pytester: pytest.Pytester) -> None:
    from tests.helpers.plugin_runs import CONFTEST, run

    pytester.makeconftest(CONFTEST.replace('formats=["torchscript-trace"]', "formats=None"))
    pytester.makepyfile(test_x="def test_x(triton_model): pass")
    result = run(pytester, "--collect-only", "-q", "--triton-formats=onnx,tensorrt,onnx-trt")
    result.stdout.fnmatch_lines(
        [
            "*test_x[[]affine-onnx-hosted[]]",
            "*test_x[[]affine-tensorrt[]]",
            "*test_x[[]affine-onnx-trt[]]",
        ]
    )
    result = run(pytester, "-rs", "--triton-formats=tensorrt,onnx-trt")
    result.stdout.fnmatch_lines(
        [
            "*SKIPPED*TensorRT plans need a GPU server with the tensorrt backend: run with "
            "--triton-gpu*",
            "*SKIPPED*ONNX Runtime's TensorRT execution accelerator needs a GPU server*",
        ]
    )


# -- real containers from the offline CPU image ----------------------------------------------
@pytest.fixture
def docker() -> Iterator[Any]:
    client = docker_or_skip()
    yield client
    assert our_containers(client) == [], "a test left a container behind"


@pytest.mark.container
def test_container_publishes_loopback_mounts_read_only_and_is_removed(
    docker: Any, tmp_path: Path
) -> None:
    write_python_model(tmp_path, "add_one")
    launcher = ContainerLauncher(ContainerSettings(CPU_IMAGE))
    with launcher.start(ServerArgs(tmp_path, startup_timeout_s=120)) as server:
        info = server.container.get_wrapped_container().attrs  # type: ignore[attr-defined]
        bindings = info["HostConfig"]["PortBindings"]
        assert {p: [b["HostIp"] for b in v] for p, v in bindings.items()} == {
            "8000/tcp": ["127.0.0.1"],
            "8001/tcp": ["127.0.0.1"],
            "8002/tcp": ["127.0.0.1"],
        }
        (mount,) = [m for m in info["Mounts"] if m["Destination"] == "/models"]
        assert mount["RW"] is False and Path(mount["Source"]) == tmp_path
        for protocol, url in (("http", server.endpoints.http), ("grpc", server.endpoints.grpc)):
            assert url.startswith("127.0.0.1:")
            client = TritonClient(url, protocol)  # type: ignore[arg-type]
            client.load_model("add_one")
            out = client.infer("add_one", {"X": np.zeros((1, 4), np.float32)})
            np.testing.assert_array_equal(out["Y"], np.ones((1, 4), np.float32))
            client.close()
        assert len(our_containers(docker)) == 1
    assert our_containers(docker) == []
    assert "successfully loaded 'add_one'" in server.log_text()


@pytest.mark.container
def test_shared_memory_reaches_a_container_only_with_the_host_dev_shm(
    docker: Any, tmp_path: Path
) -> None:
    """A container pytest-triton starts mounts this machine's /dev/shm (and prefixes the
    python backend's own regions there with our pid), whatever --triton-shared-memory says,
    so the shared-memory tests run on it as on a local server; a container started without
    the mount refuses a client before it makes anything, with the reason."""
    write_python_model(tmp_path, "add_one")
    settings = ContainerSettings.from_config(resolve(launcher="container"))
    assert settings.host_shm and "shm_size" not in settings.run_kwargs()
    with ContainerLauncher(settings).start(
        ServerArgs(tmp_path, startup_timeout_s=120, model_control_mode="none")
    ) as server:
        mounts = server.container.get_wrapped_container().attrs["Mounts"]  # type: ignore[attr-defined]
        assert [m["RW"] for m in mounts if m["Destination"] == "/dev/shm"] == [True]
        assert any(
            a.startswith("--backend-config=python,shm-region-prefix-name=pytest_triton_")
            for a in server.command
        )  # type: ignore[attr-defined]
        for protocol in ("http", "grpc"):
            with TritonClient(
                server.endpoints.url(protocol),
                protocol,  # type: ignore[arg-type]
                server=server,
                shared_memory="system",
            ) as client:
                out = client.infer("add_one", {"X": np.full((2, 4), 2, np.float32)})
                regions = client.shared_memory_regions
            np.testing.assert_array_equal(out["Y"], np.full((2, 4), 3, np.float32))
            assert regions and not any((Path("/dev/shm") / r).exists() for r in regions)
    assert not list(Path("/dev/shm").glob(f"pytest_triton_{os.getpid()}_k*"))
    plain = ContainerSettings(image=settings.image, host_shm=False)
    assert plain.run_kwargs()["shm_size"] == "1g"
    with (
        ContainerLauncher(plain).start(
            ServerArgs(tmp_path, startup_timeout_s=120, model_control_mode="none")
        ) as server,
        pytest.raises(ConfigError, match="does not map this machine's /dev/shm"),
    ):
        TritonClient(server.endpoints.http, "http", server=server, shared_memory="system")


@pytest.mark.container
def test_container_failed_start_carries_its_log(docker: Any, tmp_path: Path) -> None:
    launcher = ContainerLauncher(ContainerSettings(CPU_IMAGE))
    with pytest.raises(ServerError) as info:
        launcher.start(ServerArgs(tmp_path, extra_args=("--no-such-flag",)))
    assert "exited with code 1 before it was ready" in str(info.value)
    assert "unrecognized option '--no-such-flag'" in str(info.value)


@pytest.mark.container
def test_container_model_load_failure_names_the_model(docker: Any, tmp_path: Path) -> None:
    write_python_model(tmp_path, "broken", initialize="raise RuntimeError('no weights here')")
    with pytest.raises(ModelLoadError) as info:
        ContainerLauncher(ContainerSettings(CPU_IMAGE)).start(
            ServerArgs(tmp_path, model_control_mode="none")
        )
    assert info.value.model == "broken" and "no weights here" in info.value.reason


@pytest.mark.container
def test_missing_image_says_how_to_get_it(docker: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="build it with images/build-cpu-image"):
        ContainerLauncher(ContainerSettings("pytest-triton-cpu:no-such-tag")).start(
            ServerArgs(tmp_path)
        )
    with pytest.raises(ConfigError, match=r"could not be pulled .* `docker pull` it first"):
        ContainerLauncher(ContainerSettings("nvcr.io/nvidia/tritonserver:99.99-py3")).start(
            ServerArgs(tmp_path)
        )


@pytest.mark.container
def test_orphans_of_dead_processes_are_reaped(docker: Any) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = docker.containers.run(
        CPU_IMAGE, ["sleep", "300"], detach=True, labels={OWNER_LABEL: str(dead.pid)}
    )
    try:
        assert orphan.short_id in reap_orphan_containers(docker)
        assert orphan.id not in [c.id for c in docker.containers.list(all=True)]
    finally:
        with contextlib.suppress(Exception):
            orphan.remove(force=True)


CONTAINER = ("--triton-launcher=container",)


def assert_passes_in_the_container(docker: Any, *args: str, timeout: float) -> None:
    """`pytest --triton-launcher=container ARGS` from the checkout passes with nothing skipped
    and leaves no container of its own (other tests' containers may come and go meanwhile:
    ours are those labelled with the subprocess's pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *CONTAINER, *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    tail = stdout[-3000:]
    assert proc.returncode == 0, failure_text(stdout)
    summary = tail.strip().splitlines()[-1]
    # -q's last line: "N passed[, M warnings] in Xs"; anything skipped, failed or errored
    # would be named in it.
    assert re.fullmatch(
        r"\d+ passed(, \d+ deselected)?(, \d+ warnings?)? in [\d.]+s( \(.*\))?", summary
    ), tail
    label = f"{OWNER_LABEL}={proc.pid}"
    assert docker.containers.list(all=True, filters={"label": label}) == []


@pytest.mark.container
def test_conformance_suite_runs_in_the_container(docker: Any) -> None:
    """`pytest --triton-launcher container`: the zoo's parity suite, served from the offline
    image, for MNIST and DLRM (every format, both protocols, batched parity and bad requests;
    the other models are the process launcher's, tested there in full: kept short for
    `make test`'s 20 minutes)."""
    assert_passes_in_the_container(
        docker, "tests/models/test_zoo_served.py", "-k", "mnist or dlrm", timeout=1500
    )


@pytest.mark.container
def test_pipelines_and_sequences_run_in_the_container(docker: Any) -> None:
    """The pipeline gate (ensemble and BLS, both protocols, the batching proof per step) and
    the stateful gate (per-sequence parity with interleaved sequences), served from the
    offline image as from the process launcher."""
    assert_passes_in_the_container(
        docker, "examples/test_pipeline_gate.py", "examples/test_stateful_gate.py", timeout=900
    )


@pytest.mark.container
def test_ctrl_c_removes_the_container(docker: Any, pytester: pytest.Pytester) -> None:
    from tests.helpers.plugin_runs import CONFTEST

    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_wait="""
import time
def test_wait(triton_model, triton_client):
    open("ready", "w").write(triton_model.deployment.server.container.get_container_id())
    time.sleep(120)
"""
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--triton-launcher=container",
            "--triton-protocol=http",
        ],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=default_sigint,
    )
    ready = pytester.path / "ready"
    deadline = time.monotonic() + 180
    while not (ready.exists() and ready.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, "no container came up"
        time.sleep(0.3)
    container_id = ready.read_text()
    assert container_id in [c.id for c in docker.containers.list()]
    proc.send_signal(signal.SIGINT)
    proc.wait(90)
    assert container_id not in [c.id for c in docker.containers.list(all=True)]
