"""The local launcher against the real bundled tritonserver: start, fail, crash, stop."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from pytest_triton import ConfigError, ModelLoadError, ServerError, TritonClient
from pytest_triton.base.processes import group_members
from pytest_triton.client.triton_client import release_connections
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server import local as local_module
from pytest_triton.server.local import LocalServer, find_installation, server_environment
from tests.helpers.raw_models import write_python_model

pytestmark = pytest.mark.triton


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write_python_model(root, "add_one")
    return root


@pytest.fixture
def server(repo: Path) -> Iterator[LocalServer]:
    with LocalLauncher().start(ServerArgs(repo, startup_timeout_s=60)) as srv:
        yield srv  # type: ignore[misc]


def test_serves_on_ephemeral_loopback_ports(server: LocalServer) -> None:
    ports = {
        int(e.rsplit(":", 1)[1])
        for e in (server.endpoints.http, server.endpoints.grpc, server.endpoints.metrics or "")
    }
    assert len(ports) == 3 and not ports & {8000, 8001, 8002}
    assert all(e.startswith("127.0.0.1:") for e in (server.endpoints.http, server.endpoints.grpc))
    for flag in (
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
    ):
        assert flag in server.command
    assert TritonClient(server.endpoints.http, "http").is_server_ready()
    assert TritonClient(server.endpoints.grpc, "grpc").is_server_ready()


def test_the_stubs_idle_threads_wait_passively(repo: Path, server: LocalServer) -> None:
    """The server's environment reaches its stubs: a model that loads only where
    OMP_WAIT_POLICY is PASSIVE (what torch's libgomp and, through hosted_model.py,
    onnxruntime read) loads; spinning threads cost 15x the CPU on shared cores."""
    write_python_model(
        repo,
        "passive",
        initialize="import os; assert os.environ['OMP_WAIT_POLICY'] == 'PASSIVE', os.environ",
    )
    client = TritonClient(server.endpoints.http, "http")
    client.load_model("passive")
    assert client.is_model_ready("passive")


def test_the_environment_keeps_a_wait_policy_it_was_given() -> None:
    base = {"PATH": "/usr/bin", "OMP_WAIT_POLICY": "ACTIVE"}
    assert server_environment(find_installation(), base=base)["OMP_WAIT_POLICY"] == "ACTIVE"
    assert server_environment(find_installation(), base={})["OMP_WAIT_POLICY"] == "PASSIVE"


def test_explicit_load_unload_and_infer(server: LocalServer) -> None:
    for protocol in ("http", "grpc"):
        client = TritonClient(server.endpoints.url(protocol), protocol)  # type: ignore[arg-type]
        assert not client.is_model_ready("add_one")
        client.load_model("add_one")
        assert client.is_model_ready("add_one")
        out = client.infer("add_one", {"X": np.zeros((2, 4), np.float32)})
        np.testing.assert_array_equal(out["Y"], np.ones((2, 4), np.float32))
        client.unload_model("add_one")
        deadline = time.monotonic() + 10
        while client.is_model_ready("add_one") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not client.is_model_ready("add_one")
        client.close()


def test_stop_kills_server_and_stubs_and_removes_workdir(repo: Path) -> None:
    server = LocalLauncher().start(ServerArgs(repo, load_models=("add_one",)))
    pgid = server.process.pid
    members = group_members(pgid)
    assert len(members) >= 2, "the python backend stub should run beside the server"
    server.stop()
    assert group_members(pgid) == []
    assert not server.workdir.exists()
    assert "add_one" in server.log_text(), "the log stays readable after stop"
    server.stop()  # idempotent


def test_a_starting_stub_writes_nothing_into_the_work_directory(server: LocalServer) -> None:
    """stop() removes the work directory once the server's process group is gone; a stub
    that wrote there (its utilities' bytecode, parents made as needed) could make it again."""

    def files() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(server.workdir)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in server.workdir.rglob("*")
            if p.is_file() and p.name != "tritonserver.log"
        }

    before = files()
    client = TritonClient(server.endpoints.http, "http")
    client.load_model("add_one")  # the first stub of this server starts now
    client.infer("add_one", {"X": np.zeros((1, 4), np.float32)})
    client.close()
    assert files() == before


def test_failed_start_raises_with_log_tail(repo: Path) -> None:
    with pytest.raises(ServerError) as info:
        LocalLauncher().start(ServerArgs(repo, extra_args=("--no-such-flag",)))
    text = str(info.value)
    assert "exited with code 1 before it was ready" in text
    assert "--- tritonserver log (tail) ---" in text and "no-such-flag" in text


def test_model_failing_at_startup_names_model_and_reason(tmp_path: Path) -> None:
    write_python_model(tmp_path, "broken", initialize="raise RuntimeError('weights missing')")
    with pytest.raises(ModelLoadError) as info:
        LocalLauncher().start(ServerArgs(tmp_path, model_control_mode="none"))
    assert info.value.model == "broken"
    assert "weights missing" in info.value.reason
    assert "model 'broken' failed to load" in str(info.value)


def test_crash_is_reported_with_exit_code_and_leaves_nothing(repo: Path) -> None:
    server = LocalLauncher().start(ServerArgs(repo, load_models=("add_one",)))
    regions = list(Path("/dev/shm").glob(f"{server.shm_prefix}*"))
    assert regions, "the python backend should have made its shared-memory region"
    # A model loaded with its files in the request runs from Triton's own copy in /tmp.
    files = {
        f"file:{p.relative_to(repo / 'add_one').as_posix()}": p.read_bytes()
        for p in (repo / "add_one").rglob("*")
        if p.is_file() and p.name != "config.pbtxt"
    }
    with TritonClient(server.endpoints.http) as client:
        config = {**client.model_config("add_one"), "name": "add_one_copy"}
        client.load_model("add_one_copy", config=json.dumps(config), files=files)
    stubs = [p for p in psutil.Process(server.process.pid).children() if "stub" in p.name()]
    copies = local_module.localized_copies(p.pid for p in stubs)
    assert copies, "the model loaded with its files should run from a copy in /tmp"
    environments = {p.environ().get("TMPDIR") for p in stubs}
    assert environments == {str(server.workdir / "tmp")}
    # The watcher notes them (its stubs may be gone before the server is found dead).
    deadline = time.monotonic() + 10
    while not copies <= server.copies and time.monotonic() < deadline:
        time.sleep(0.05)
    assert copies <= server.copies
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(10)
    with pytest.raises(ServerError, match="exited with code -9"):
        server.check_alive()
    server.stop()
    assert not any(r.exists() for r in regions), "a killed server's shared memory must go"
    assert not any(c.exists() for c in copies), "a killed server's model copies must go"
    assert not server.workdir.exists()


def test_startup_timeout_is_an_error_not_a_hang(tmp_path: Path) -> None:
    write_python_model(tmp_path, "slow", initialize="import time; time.sleep(60)")
    started = time.monotonic()
    with pytest.raises(ServerError, match=r"not ready after 2s .*--triton-startup-timeout"):
        LocalLauncher().start(
            ServerArgs(tmp_path, model_control_mode="none", startup_timeout_s=2, exit_timeout_s=1)
        )
    assert time.monotonic() - started < 30


def test_missing_executable_says_how_to_fix() -> None:
    with pytest.raises(ConfigError, match="is not an executable file"):
        LocalLauncher("/nonexistent/tritonserver")


def test_port_taken_between_choice_and_bind_is_retried(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    calls = []
    real = local_module.free_ports

    def first_taken(count: int = 3, host: str = "127.0.0.1") -> list[int]:
        calls.append(1)
        ports = real(count, host)
        return [taken, *ports[1:]] if len(calls) == 1 else ports

    monkeypatch.setattr(local_module, "free_ports", first_taken)
    try:
        with LocalLauncher().start(ServerArgs(repo)) as srv:
            assert not srv.endpoints.http.endswith(f":{taken}")
        assert len(calls) == 2
    finally:
        squatter.close()


def test_a_request_to_a_stopped_server_says_it_was_stopped(repo: Path) -> None:
    """Not 'exited with code 0': the server was stopped by its owner, not crashed."""
    server = LocalLauncher().start(ServerArgs(repo, load_models=("add_one",)))
    client = TritonClient(server.endpoints.grpc, "grpc", server=server)
    client.infer("add_one", {"X": np.zeros((1, 4), np.float32)})
    server.stop()
    with pytest.raises(ServerError, match=r"at 127\.0\.0\.1:\d+ was stopped by pytest-triton"):
        client.infer("add_one", {"X": np.zeros((1, 4), np.float32)})


def test_clients_left_open_do_not_hold_up_the_stop(repo: Path) -> None:
    """Triton's graceful stop waits for every open connection up to its exit timeout; the
    launcher first closes this process's idle ones (the clients stay usable meanwhile)."""
    server = LocalLauncher().start(ServerArgs(repo, load_models=("add_one",)))
    x = {"X": np.zeros((1, 4), np.float32)}
    try:
        clients = [TritonClient(server.endpoints.url(p), p) for p in ("http", "grpc")]
        for client in clients:
            client.infer("add_one", x)
            client.model_config("add_one")  # the control connection too
        release_connections([server.endpoints.http, server.endpoints.grpc])
        for client in clients:  # new connections, as if nothing happened
            np.testing.assert_array_equal(client.infer("add_one", x)["Y"], x["X"] + 1)
            assert client.model_config("add_one")["name"] == "add_one"
    finally:
        server.stop()
    log = server.log_text()
    assert "Signal (15) received" in log
    assert "service connections" not in log, log[-1500:]  # no wait for an open connection


def _send_and_drop(url: str, protocol: str) -> weakref.finalize:
    """Inference only: the client's own connections (HTTP/1.1 keep-alive, direct HTTP/2);
    tritonclient's control client never connects. Returns the client's release finalizer."""
    client = TritonClient(url, protocol)  # type: ignore[arg-type]
    x = {"X": np.zeros((2, 4), np.float32)}
    request = client.prepare("add_one", x)
    np.testing.assert_array_equal(client.send(request)["Y"], x["X"] + 1)
    return client._release


def _control_and_drop(url: str, protocol: str) -> tuple[weakref.finalize, Any]:
    """A control call: tritonclient's own client connects (geventhttpclient, grpcio's
    channel). Returns the release finalizer and that control client."""
    client = TritonClient(url, protocol)  # type: ignore[arg-type]
    client.model_config("add_one")
    return client._release, client.control.tritonclient


def _connections_to(port: int) -> list[object]:
    return [
        c
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    ]


GRPCIO_CLOSE_S = 5.0
"""How long a closed grpcio channel's socket may stay open: Channel.close() returns before
one of grpcio's own threads shuts the socket (strace: shutdown() and close() of its fd from
another thread after the drop returned; CI once saw it still open, 1 run in 1,150). A client
kept alive (a reference cycle, with the collector off here) never closes it at all."""


def _open_after(port: int, seconds: float) -> list[object]:
    deadline = time.monotonic() + seconds
    while (left := _connections_to(port)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_dropped_without_close_leaves_no_connection(repo: Path, protocol: str) -> None:
    """Nothing but the client may own its connections, and dropping it closes them: a
    reference cycle (the direct HTTP/2 path's connection <-> pool) kept its sockets open
    until the garbage collector ran, and the server's graceful stop then waited its whole
    exit timeout for them. Our own sockets are shut when the drop returns; grpcio's channel
    is closed then, and its socket follows from grpcio's thread (GRPCIO_CLOSE_S)."""
    server = LocalLauncher().start(ServerArgs(repo, load_models=("add_one",)))
    port = int(getattr(server.endpoints, protocol).rsplit(":", 1)[1])
    url = server.endpoints.url(protocol)
    gc.disable()  # what a cycle would need; it must not be needed
    try:
        assert not _send_and_drop(url, protocol).alive, "dropping the client did not close it"
        assert _connections_to(port) == []
        released, control = _control_and_drop(url, protocol)
        assert not released.alive, "dropping the client did not close it"
        if protocol == "http":  # geventhttpclient closes its socket in the calling thread
            assert _connections_to(port) == []
        else:
            with pytest.raises(ValueError, match="closed channel"):
                control.is_server_live()  # closed at the drop, not by the collector
            assert _open_after(port, GRPCIO_CLOSE_S) == []
    finally:
        gc.enable()
        server.stop()


def test_addresses_name_the_same_server_however_written() -> None:
    from pytest_triton.base.watched_servers import address_key

    same = {
        address_key(u)
        for u in ("127.0.0.1:8000", "http://localhost:8000/", "grpc://LOCALHOST:8000")
    }
    assert same == {"127.0.0.1:8000"}
    assert address_key("10.0.0.7:8001") == "10.0.0.7:8001"
    assert address_key("[::1]:8000") == "[::1]:8000"  # another address than 127.0.0.1


AUTO_COMPLETED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [4]})
        config.set_max_batch_size(8)
        return config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]
            )
            for r in requests
        ]
"""


def test_auto_completion_is_off_only_where_no_model_needs_it(tmp_path: Path) -> None:
    """Our own models have complete configs: their server skips the auto-complete stub each
    load would start. A model that completes its config in model.py still loads."""
    ours = tmp_path / "ours"
    write_python_model(ours, "add_one")
    with LocalLauncher().start(ServerArgs(ours, model_control_mode="none")) as srv:
        assert "--disable-auto-complete-config" in srv.command  # type: ignore[attr-defined]
    theirs = tmp_path / "theirs"
    (theirs / "completed" / "1").mkdir(parents=True)
    (theirs / "completed" / "1" / "model.py").write_text(AUTO_COMPLETED)
    (theirs / "completed" / "config.pbtxt").write_text('backend: "python"\n')
    with LocalLauncher().start(ServerArgs(theirs, model_control_mode="none")) as srv:
        assert "--disable-auto-complete-config" not in srv.command  # type: ignore[attr-defined]
        client = TritonClient(srv.endpoints.http, "http")
        try:
            y = client.infer("completed", {"X": np.zeros((2, 4), np.float32)})["Y"]
        finally:
            client.close()
        np.testing.assert_array_equal(y, np.ones((2, 4), np.float32))


def test_the_next_launch_kills_stubs_that_outlived_their_server(repo: Path) -> None:
    """A killed xdist run once left its zoo server's python stubs running (reparented to
    init, each spinning a core) after the server itself had died with its owner: the next
    launch's reaping kills whatever still runs from a dead owner's work directory, then
    removes the directory. A copy of `sleep` stands in for the stub binary, at the path a
    stub has."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    workdir = Path(tempfile.gettempdir()) / f"{local_module.WORKDIR_PREFIX}{dead.pid}-test"
    stub = workdir / "backends" / "python" / "triton_python_backend_stub"
    stub.parent.mkdir(parents=True)
    shutil.copy(shutil.which("sleep") or "/bin/sleep", stub)
    orphan = subprocess.Popen([str(stub), "300"], start_new_session=True)
    try:
        with LocalLauncher().start(ServerArgs(repo, model_control_mode="none")):
            # ended, 290 s early (its exit status may have been collected by the reaping)
            orphan.wait(10)
            assert not workdir.exists()
    finally:
        if orphan.poll() is None:
            orphan.kill()
        shutil.rmtree(workdir, ignore_errors=True)


INTERRUPTED_START = """
import json, os, signal, sys, tempfile, time
from pathlib import Path
import psutil
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server import local

# (a suite started as a shell's background job hands its children SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
real = local.die_with_parent


def interrupt_the_parent():  # runs in the child, between its fork and its exec
    real()
    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(0.3)


local.die_with_parent = interrupt_the_parent
try:
    LocalLauncher().start(ServerArgs(Path(sys.argv[1])))
    outcome = "started"
except KeyboardInterrupt:
    outcome = "interrupted"
time.sleep(1.0)  # past the child's exec, had it been left to run
live = []
for child in psutil.Process().children(recursive=True):
    try:
        if child.status() != psutil.STATUS_ZOMBIE:
            live.append(" ".join(child.cmdline()))
    except psutil.Error:  # gone since it was listed
        pass
mine = f"{local.WORKDIR_PREFIX}{os.getpid()}-*"
workdirs = [str(p) for p in Path(tempfile.gettempdir()).glob(mine)]
print(json.dumps({"outcome": outcome, "servers": live, "workdirs": workdirs}))
"""


def test_a_ctrl_c_while_the_server_process_starts_leaves_nothing(
    repo: Path, tmp_path: Path
) -> None:
    """Popen waits for the child's exec; a Ctrl-C in that wait once raised with the server
    started and no Popen to stop it by, so it ran on until its owner exited. The child here
    sends the SIGINT itself, from between its fork and its exec."""
    script = tmp_path / "interrupted_start.py"
    script.write_text(INTERRUPTED_START)
    env = dict(
        os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), TMPDIR=str(tmp_path)
    )
    done = subprocess.run(
        [sys.executable, str(script), str(repo)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"outcome": "interrupted", "servers": [], "workdirs": []}, done.stderr
