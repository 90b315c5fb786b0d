"""Shared memory as a transport: parity over system shared memory on both protocols for every
zoo model, regions registered once and grown when a request needs more, nothing left in
/dev/shm on any exit path (close, errors, Ctrl-C, SIGKILL), and clear refusals where shared
memory cannot be offered (CUDA on this GPU-less machine, remote servers, containers without
the host's /dev/shm)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pytest_triton import (
    ConfigError,
    InferenceError,
    SharedMemoryError,
    TritonClient,
    assert_dynamic_batching,
    factories,
)
from pytest_triton.client.wire import shm
from pytest_triton.client.wire.shm import cuda_problem, our_regions, reap_orphaned_regions, refusal
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import RunningServer
from pytest_triton.session.deployment import Deployment, ServedModel
from tests.helpers.interrupts import default_sigint
from tests.helpers.plugin_runs import CONFTEST
from tests.helpers.raw_models import write_bytes_model, write_python_model

PROTOCOLS = ["http", "grpc"]
REPO = Path(__file__).resolve().parents[2]


# -- parity over system shared memory: every zoo model, both protocols -----------------------
zoo_shm_client = factories.client(server="zoo_server", shared_memory=["system"])


@pytest.fixture(scope="module")
def zoo_regions_checked(zoo_server: Deployment) -> Iterator[None]:
    """After this module's zoo tests, closing the server's clients leaves no region of ours."""
    yield
    zoo_server.close_clients()
    assert our_regions() == []


@pytest.mark.triton
def test_parity_over_shared_memory(
    zoo_model: ServedModel, zoo_shm_client: TritonClient, zoo_regions_checked: None
) -> None:
    assert zoo_shm_client.shared_memory == "system" and zoo_shm_client.id.endswith("-shm")
    report = zoo_model.assert_parity(zoo_shm_client, batch_size=3)
    assert report.ok and {d.name for d in report.diffs} == set(zoo_model.variant.spec.output_names)
    assert zoo_shm_client.shared_memory_regions, "its regions stay registered between requests"


@pytest.mark.triton
def test_batched_parity_over_shared_memory(
    zoo_model: ServedModel, zoo_shm_client: TritonClient, zoo_regions_checked: None
) -> None:
    """Eight requests in flight together, each in its own blocks of one region."""
    delta = zoo_model.assert_batched_parity(zoo_shm_client, requests=8, seed=5)
    assert delta.requests == 8 and delta.inference_count == 8
    assert_dynamic_batching(delta)


# -- regions: registered once, grown, released, unlinked ------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("repo")
    write_python_model(root, "add_one", max_batch_size=4096)
    write_bytes_model(root)
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as srv:
        yield srv


def shm_client(server: RunningServer, protocol: str, **kwargs: object) -> TritonClient:
    return TritonClient(
        server.endpoints.url(protocol),
        protocol,  # type: ignore[arg-type]
        server=server,
        shared_memory="system",
        **kwargs,
    )  # type: ignore[arg-type]


def server_regions(client: TritonClient) -> list[str]:
    """What the server has registered, by name (its own answer, both protocols)."""
    if client.protocol == "http":
        status = client.control.tritonclient.get_system_shared_memory_status()
        return sorted(r["name"] for r in status)
    status = client.control.tritonclient.get_system_shared_memory_status(as_json=True)
    return sorted(status.get("regions", {}))


def left(names: list[str], server: RunningServer) -> list[str]:
    """Which of these regions are still in /dev/shm or registered on the server."""
    registered = server_regions(TritonClient(server.endpoints.http, "http"))
    return [n for n in names if (shm.SHM_ROOT / n).exists() or n in registered]


@pytest.mark.triton
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_load_users_batches_share_one_registered_region(
    server: RunningServer, protocol: str
) -> None:
    client = shm_client(server, protocol)
    batches = [{"X": np.full((16, 4), i, np.float32)} for i in range(4)]
    requests = client.prepare_all("add_one", batches)
    regions = client.shared_memory_regions
    assert len(regions) == 1 and left(regions, server) == regions
    assert regions[0].startswith(f"pytest_triton_{os.getpid()}_c")
    for _ in range(3):
        for i, request in enumerate(requests):
            client.send_status(request)
            np.testing.assert_array_equal(client.send(request)["Y"], np.full((16, 4), i + 1))
    assert client.shared_memory_regions == regions, "sending registers nothing more"
    client.close()
    assert left(regions, server) == [] and client.shared_memory_regions == []


@pytest.mark.triton
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_larger_request_grows_the_region_and_the_old_one_goes(
    server: RunningServer, protocol: str
) -> None:
    with shm_client(server, protocol) as client:
        small = client.infer("add_one", {"X": np.zeros((1, 4), np.float32)})
        first = client.shared_memory_regions
        big = np.arange(4096 * 4, dtype=np.float32).reshape(4096, 4)  # 64 KiB each way
        np.testing.assert_array_equal(client.infer("add_one", {"X": big})["Y"], big + 1)
        second = client.shared_memory_regions
        assert len(first) == len(second) == 1 and first != second, (first, second)
        assert left(first, server) == [] and left(second, server) == second
        np.testing.assert_array_equal(small["Y"], np.ones((1, 4)))
    assert left(second, server) == []


@pytest.mark.triton
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bytes_tensors_over_shared_memory(server: RunningServer, protocol: str) -> None:
    words = np.array([[b"triton", b"caf\xc3\xa9"], [b"a b", b"z"]], dtype=object)
    with shm_client(server, protocol) as client:
        out = client.infer("echo_bytes", {"TEXT": words})["UPPER"]
        regions = client.shared_memory_regions
    assert out.tolist() == [[b"TRITON", b"CAF\xc3\xa9"], [b"A B", b"Z"]]
    assert regions and left(regions, server) == []


@pytest.mark.triton
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_output_larger_than_its_block_names_the_setting(
    server: RunningServer, protocol: str
) -> None:
    """BYTES outputs have no size in the metadata: they get --triton-output-shared-memory-size
    bytes, and an answer that does not fit says which setting to raise."""
    words = np.array([[b"x" * 100]], dtype=object)
    with shm_client(server, protocol, output_shared_memory_size=16) as client:
        with pytest.raises(SharedMemoryError, match="--triton-output-shared-memory-size"):
            client.infer("echo_bytes", {"TEXT": words})
        regions = client.shared_memory_regions
    assert regions and left(regions, server) == []


@pytest.mark.triton
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rejected_request_over_shared_memory_keeps_triton_s_words(
    server: RunningServer, protocol: str
) -> None:
    with shm_client(server, protocol) as client:
        with pytest.raises(InferenceError, match="unexpected shape for input 'X'"):
            client.infer("add_one", {"X": np.zeros((2, 5), np.float32)})
        request = client.prepare("add_one", {"X": np.zeros((2, 5), np.float32)}, ["Y"])
        with pytest.raises(InferenceError, match="unexpected shape"):
            client.send_status(request)  # the load path counts it as a failure too
        regions = client.shared_memory_regions
    assert regions and left(regions, server) == []


@pytest.mark.triton
def test_a_region_the_server_cannot_map_is_named_and_unlinked(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server opens regions by name: one that is gone when it registers (as for a server
    in a container without this machine's /dev/shm) fails with the server's reason and a hint,
    and nothing is left behind."""
    register = shm._SystemMemory.register

    def unlink_then_register(
        self: object, control: object, name: str, *args: object, **kwargs: object
    ) -> None:
        (shm.SHM_ROOT / name).unlink()
        register(self, control, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(shm._SystemMemory, "register", unlink_then_register)
    with shm_client(server, "http") as client, pytest.raises(SharedMemoryError) as info:
        client.infer("add_one", {"X": np.zeros((1, 4), np.float32)})
    message = str(info.value)
    assert "the server could not map system shared memory region 'pytest_triton_" in message
    assert "-v /dev/shm:/dev/shm" in message
    name = message.split("region '", 1)[1].split("'", 1)[0]
    assert client.shared_memory_regions == [] and left([name], server) == []


def stacks_of(proc: subprocess.Popen[str]) -> str:
    """Where a process that should have exited is stuck (py-spy, installed by the dev extra),
    and what it wrote to stderr."""
    spy = Path(sys.executable).with_name("py-spy")
    dump = (
        subprocess.run(
            [str(spy), "dump", "--pid", str(proc.pid)], capture_output=True, text=True
        ).stdout
        if spy.exists()
        else "(no py-spy)"
    )
    proc.kill()
    _, err = proc.communicate()
    return f"{dump}\nstderr:\n{err[-3000:]}"


ORPHAN_SCRIPT = """
import sys, time, numpy as np
from pytest_triton import TritonClient
client = TritonClient(sys.argv[1], sys.argv[2], shared_memory="system")
client.prepare("add_one", {"X": np.zeros((2, 4), np.float32)}, ["Y"])
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.triton
@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "sigkill"]
)
def test_no_region_outlives_its_process(server: RunningServer, sig: signal.Signals) -> None:
    """Ctrl-C and SIGTERM exit through the interpreter's exit path (atexit closes every
    client's regions); SIGKILL skips it, and the next process reaps the regions by the dead
    owner's pid in their names."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if sig == signal.SIGTERM:  # a program that turns SIGTERM into an exit, as Locust does
        script = (
            "import signal, sys; signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))\n"
            + ORPHAN_SCRIPT
        )
    else:
        script = ORPHAN_SCRIPT
    proc = subprocess.Popen(
        [sys.executable, "-c", script, server.endpoints.grpc, "grpc"],
        preexec_fn=default_sigint,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", (
            proc.stderr.read() if proc.stderr else ""
        )
        assert len(our_regions(proc.pid)) == 1
        proc.send_signal(sig)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after {sig.name}:\n{stacks_of(proc)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if sig == signal.SIGKILL:
        reap_orphaned_regions()  # what the next pytest-triton process does first
    deadline = time.monotonic() + 5
    while our_regions(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert our_regions(proc.pid) == []


def test_orphans_are_reaped_by_owner_pid(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    orphan = shm.SHM_ROOT / f"pytest_triton_{int(dead.stdout)}_c0_0"
    mine = shm.SHM_ROOT / f"pytest_triton_{os.getpid()}_c999_0"
    orphan.write_bytes(b"x")
    mine.write_bytes(b"x")
    try:
        assert orphan in reap_orphaned_regions()
        assert not orphan.exists() and mine.exists()
    finally:
        orphan.unlink(missing_ok=True)
        mine.unlink(missing_ok=True)


# -- refusals ---------------------------------------------------------------------------------
def test_cuda_is_refused_on_this_machine_with_its_reason() -> None:
    """Real: on a machine without a GPU (this one) or without cuda-python, a CUDA client is
    refused before anything is made, naming what is missing."""
    problem = cuda_problem()
    if problem is None:
        pytest.skip(
            "this machine has a GPU and cuda-python: the GPU recipe in the README "
            "runs CUDA shared memory instead"
        )
    with pytest.raises(ConfigError) as info:
        TritonClient("127.0.0.1:1", "http", shared_memory="cuda")
    assert str(info.value) == f"--triton-shared-memory cuda: {problem}"
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        assert "needs an NVIDIA GPU on this machine, and there is none" in problem


def test_cuda_problem_names_what_is_missing(tmp_path: Path) -> None:
    assert "needs an NVIDIA GPU" in str(cuda_problem(tmp_path))
    (tmp_path / "nvidia0").touch()

    def no_cuda_python(name: str) -> None:
        raise RuntimeError("CUDA shared memory utilities require Python package 'cuda-python'")

    assert "pip install 'tritonclient[cuda]'" in str(cuda_problem(tmp_path, no_cuda_python))
    assert cuda_problem(tmp_path, lambda name: None) is None


@pytest.mark.parametrize(
    ("transport", "url", "kwargs", "reason"),
    [
        (
            "system",
            "10.1.2.3:8000",
            {},
            "needs the server on this machine, and 10.1.2.3:8000 is not a loopback address",
        ),
        ("cuda", "triton.example:8001", {}, "not a loopback address"),
        (
            "system",
            "127.0.0.1:8000",
            {"host_memory": False},
            "runs in a container that does not map this machine's /dev/shm",
        ),
        ("cuda", "127.0.0.1:8000", {"server_gpu": False}, "the server has no GPU"),
        ("tmpfs", "127.0.0.1:8000", {}, "unknown transport 'tmpfs'"),
    ],
)
def test_refusal_reasons(transport: str, url: str, kwargs: dict[str, bool], reason: str) -> None:
    assert reason in str(refusal(transport, url, **kwargs))


def test_what_can_be_offered() -> None:
    assert refusal("none", "10.1.2.3:8000") is None
    assert refusal("system", "127.0.0.1:8000", host_memory=True) is None
    assert refusal("system", "localhost:8000") is None  # external, unknown: tried at register


# -- the plugin: protocol x transport, and its usage errors ------------------------------------
def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)


@pytest.mark.triton
def test_the_client_fixture_is_parametrized_over_protocol_and_transport(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_user=textwrap.dedent(f"""
        import os
        def test_parity(triton_model, triton_client):
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{os.getpid()}} {{triton_client.id}}\\n")
            triton_model.assert_parity(triton_client, batch_size=4)
            triton_model.assert_batched_parity(triton_client, requests=4)
    """)
    )
    result = run(pytester, "-v", "--triton-shared-memory", "none,system")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*test_parity[[]affine-torchscript-trace-hosted-http[]] PASSED*",
            "*test_parity[[]affine-torchscript-trace-hosted-grpc[]] PASSED*",
            "*test_parity[[]affine-torchscript-trace-hosted-http-shm[]] PASSED*",
            "*test_parity[[]affine-torchscript-trace-hosted-grpc-shm[]] PASSED*",
        ]
    )
    assert "shared memory=none,system" in result.stdout.str()
    seen = [line.split() for line in pids.read_text().splitlines()]
    assert sorted(client for _, client in seen) == ["grpc", "grpc-shm", "http", "http-shm"]
    assert our_regions(int(seen[0][0])) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--triton-shared-memory", "tmpfs"],
            "command line --triton-shared-memory: expected none, system or cuda",
        ),
        (
            ["--triton-output-shared-memory-size", "0"],
            "command line --triton-output-shared-memory-size: expected an integer >= 1",
        ),
    ],
)
def test_bad_shared_memory_settings_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_cuda_shared_memory_stops_the_session_at_once_here(pytester: pytest.Pytester) -> None:
    problem = cuda_problem()
    if problem is None:
        pytest.skip("this machine can use CUDA shared memory")
    pytester.makepyfile(test_x="def test_x(): pass")
    result = run(pytester, "--triton-shared-memory", "cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"pytest-triton --triton-shared-memory cuda: {problem}" in result.stderr.str()
