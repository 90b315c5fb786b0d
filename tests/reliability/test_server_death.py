"""A server killed mid-test (SIGKILL, SIGSEGV): the requests in flight and the next ones fail
within 10 s on both protocols, through ServedModel, Deployment and TritonClient (made with
`server=` or from a bare URL), with a ServerError naming the launcher, the signal and the log
tail; a client in another process gets an InferenceError naming model, protocol and address.
Afterwards nothing of the server is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from pytest_triton import InferenceError, Repository, ServerError, TritonClient
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.processes import group_members
from pytest_triton.server import ServerArgs
from pytest_triton.server.container import CPU_IMAGE, ContainerLauncher, ContainerSettings
from pytest_triton.server.local import LocalServer
from pytest_triton.session.deployment import Deployment
from pytest_triton.session.lifecycle import start_deployment
from tests.helpers.leftovers import SHM
from tests.helpers.raw_models import write_python_model, write_slow_model
from tests.helpers.tiny_models import scorer_spec

pytestmark = [pytest.mark.reliability, pytest.mark.triton]
PROTOCOLS = ("http", "grpc")
DEADLINE_S = 10.0
SIGNALS = [signal.SIGKILL, signal.SIGSEGV]
REPO_ROOT = Path(__file__).resolve().parents[2]


def death_text(launcher: str, sig: signal.Signals) -> str:
    code = -sig if launcher == "local" else 128 + sig
    return f"tritonserver ({launcher}) exited with code {code} (killed by {sig.name})"


@dataclass
class Outcome:
    error: Exception | None
    seconds: float


def timed(call: Callable[[], Any]) -> Outcome:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:
        return Outcome(exc, time.monotonic() - started)
    return Outcome(None, time.monotonic() - started)


def assert_died(outcome: Outcome, what: str, text: str, since: float = 0.0) -> None:
    """Failed with the server's death, within the deadline (counted from `since`)."""
    assert isinstance(outcome.error, ServerError), f"{what}: {outcome.error!r}"
    message = str(outcome.error)
    assert text in message, f"{what}: {message[:500]}"
    assert "--- tritonserver log (tail) ---" in message, f"{what}: no log tail"
    assert outcome.seconds - since < DEADLINE_S, f"{what} took {outcome.seconds:.1f}s"


# -- a deployment killed mid-test -------------------------------------------------------------
@pytest.fixture
def deployment() -> Iterator[Deployment]:
    repo = Repository.create(
        [
            scorer_spec(formats=["torchscript-trace"]),
            scorer_spec("later", formats=["torchscript-trace"]),
        ]
    )
    try:
        deployment = start_deployment(resolve(), repo)
        try:
            write_slow_model(repo.root, "slow", seconds=120)
            deployment.client("http").load_model("slow")
            yield deployment
        finally:
            deployment.close()
    finally:
        repo.remove()


def in_flight(deployment: Deployment, kill: Callable[[], None]) -> dict[str, Outcome]:
    """Requests to the 120-s model from every kind of client and protocol, then the kill.

    HTTP clients work only in the thread that made them: the Deployment's own HTTP client
    sends from this thread, every other client is made in the thread that sends."""
    server = deployment.server
    x = {"X": np.zeros((1, 4), np.float32)}
    outcomes: dict[str, Outcome] = {}
    sending = threading.Barrier(6)

    def send(name: str, make: Callable[[], TritonClient]) -> None:
        client = make()
        sending.wait()
        outcomes[name] = timed(lambda: client.infer("slow", x, ["Y"]))

    makers: dict[str, Callable[[], TritonClient]] = {
        "Deployment.client(grpc)": lambda: deployment.client("grpc")
    }
    for p in PROTOCOLS:
        url = server.endpoints.url(p)
        makers[f"TritonClient(server=) {p}"] = lambda u=url, p=p: TritonClient(u, p, server=server)
        makers[f"TritonClient(url) {p}"] = lambda u=url, p=p: TritonClient(u, p)
    threads = [threading.Thread(target=send, args=item) for item in makers.items()]
    for t in threads:
        t.start()
    http = deployment.client("http")
    sending.wait()
    killer = threading.Timer(1.0, kill)
    killer.start()
    outcomes["Deployment.client(http)"] = timed(lambda: http.infer("slow", x, ["Y"]))
    for t in threads:
        t.join(DEADLINE_S + 30)
    killer.join()
    return outcomes


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_killed_local_server_fails_every_request_at_once(
    deployment: Deployment, sig: signal.Signals
) -> None:
    server = deployment.server
    assert isinstance(server, LocalServer)
    model = deployment.model("scorer_torchscript_trace")
    for p in PROTOCOLS:
        model.assert_parity(deployment.client(p))
    pgid, workdir, shm_prefix = server.process.pid, server.workdir, server.shm_prefix
    assert len(group_members(pgid)) >= 3, "the server and two python stubs should run"
    assert list(SHM.glob(f"{shm_prefix}*"))

    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        os.kill(server.process.pid, sig)

    started = time.monotonic()
    outcomes = in_flight(deployment, kill)
    since = killed_at[0] - started
    expected = death_text("local", sig)
    assert len(outcomes) == 6
    for what, outcome in outcomes.items():
        assert_died(outcome, f"in flight: {what}", expected, since)
        protocol = "grpc" if "grpc" in what else "http"
        assert f"{protocol} request to model 'slow'" in str(outcome.error)

    # the next request, through every object a test may hold
    next_requests: dict[str, Callable[[], object]] = {}
    for p in PROTOCOLS:
        client = deployment.client(p)
        url = server.endpoints.url(p)
        next_requests[f"ServedModel.assert_parity {p}"] = lambda c=client: model.assert_parity(c)
        next_requests[f"ServedModel.assert_batched_parity {p}"] = lambda c=client: (
            model.assert_batched_parity(c, requests=4)
        )
        next_requests[f"TritonClient(server=) {p}"] = lambda u=url, p=p: TritonClient(
            u, p, server=server
        ).infer(  # type: ignore[arg-type]
            "scorer_torchscript_trace", model.inputs(1)
        )
        next_requests[f"TritonClient(url) {p}"] = lambda u=url, p=p: TritonClient(u, p).infer(  # type: ignore[arg-type]
            "scorer_torchscript_trace", model.inputs(1)
        )
    next_requests["Deployment.model (a model not loaded yet)"] = lambda: deployment.model(
        "later_torchscript_trace"
    )
    for what, call in next_requests.items():
        outcome = timed(call)
        assert_died(outcome, f"next: {what}", expected)
        if what == "ServedModel.assert_parity grpc":  # what a ServedModel user reads
            assert str(outcome.error).startswith(
                f"grpc request to model 'scorer_torchscript_trace' at {server.endpoints.grpc} "
                f"failed: {expected}\n--- tritonserver log (tail) ---"
            )
            assert "successfully loaded 'scorer_torchscript_trace'" in outcome.error.log_tail  # type: ignore[union-attr]

    deployment.close()
    assert group_members(pgid) == [], "stubs outlived the killed server"
    assert not workdir.exists()
    assert not list(SHM.glob(f"{shm_prefix}*"))


# -- a client in another process: it knows only the URL --------------------------------------
OWNER = """
import json, sys
from pathlib import Path
from pytest_triton.server import LocalLauncher, ServerArgs
server = LocalLauncher().start(ServerArgs(Path(sys.argv[1]), model_control_mode="none"))
print(json.dumps({"http": server.endpoints.http, "grpc": server.endpoints.grpc,
                  "pid": server.process.pid}), flush=True)
sys.stdin.read()
server.stop()
"""


@pytest.fixture
def foreign_server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A server started and watched by another process."""
    write_python_model(tmp_path, "add_one")
    write_slow_model(tmp_path, "slow", seconds=120)
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        info = json.loads(owner.stdout.readline())
        info["owner"] = owner
        yield info
    finally:
        if owner.stdin:
            owner.stdin.close()
        owner.wait(60)
    assert owner.returncode == 0


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_client_in_another_process_names_model_protocol_and_address(
    foreign_server: dict[str, Any], sig: signal.Signals
) -> None:
    """Only the owner of a server watches it: a client elsewhere, which knows nothing but the
    URL, still fails within the deadline with an error naming model, protocol and address
    (the owner's watcher kills the stubs that held the server's sockets open)."""
    x = {"X": np.zeros((1, 4), np.float32)}
    outcomes: dict[str, Outcome] = {}
    ready = threading.Barrier(3)

    def send(protocol: str) -> None:
        client = TritonClient(foreign_server[protocol], protocol)  # type: ignore[arg-type]
        client.infer("add_one", x)
        ready.wait()
        outcomes[f"in flight {protocol}"] = timed(lambda: client.infer("slow", x, ["Y"]))

    threads = [threading.Thread(target=send, args=(p,)) for p in PROTOCOLS]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(1.0)
    killed_at = time.monotonic()
    os.kill(foreign_server["pid"], sig)
    for t in threads:
        t.join(DEADLINE_S + 30)
    for protocol in PROTOCOLS:
        fresh = TritonClient(foreign_server[protocol], protocol)  # type: ignore[arg-type]
        outcomes[f"next {protocol}"] = timed(lambda c=fresh: c.infer("add_one", x))
    assert time.monotonic() - killed_at < 2 * DEADLINE_S
    for what, outcome in outcomes.items():
        protocol = what.rsplit(" ", 1)[1]
        url = foreign_server[protocol]
        model = "slow" if what.startswith("in flight") else "add_one"
        assert isinstance(outcome.error, InferenceError), f"{what}: {outcome.error!r}"
        message = str(outcome.error)
        assert f"{protocol} request to model '{model}' failed" in message, message
        assert f"server at {url}" in message, message
        assert outcome.seconds < DEADLINE_S + (1.0 if model == "slow" else 0.0), (
            f"{what}: {outcome.seconds:.1f}s"
        )
        if model == "add_one":
            # a new connection to a server dying under SIGSEGV/SIGKILL is refused once its
            # port is closed, or reset while the kernel still tears the process down
            assert "unreachable" in message or "dropped the connection" in message, message
        else:
            assert "dropped the connection" in message, message


# -- the container launcher -------------------------------------------------------------------
@pytest.fixture
def container_server(tmp_path: Path) -> Iterator[Any]:
    from tests.helpers.containers import docker_or_skip, our_containers

    docker = docker_or_skip()
    write_python_model(tmp_path, "add_one")
    write_slow_model(tmp_path, "slow", seconds=120)
    tmp_path.chmod(0o755)
    launcher = ContainerLauncher(ContainerSettings(CPU_IMAGE))
    with launcher.start(ServerArgs(tmp_path, model_control_mode="none")) as server:
        yield server
    assert our_containers(docker) == [], "the container of the killed server was left behind"


@pytest.mark.container
@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_killed_container_server_fails_every_request_at_once(
    container_server: Any, sig: signal.Signals
) -> None:
    """The same through the container launcher: tritonserver runs under Docker's init, so the
    signal reaches it (a PID 1 ignores SIGSEGV from outside) and the exit code names it."""
    server = container_server
    x = {"X": np.zeros((1, 4), np.float32)}
    init = server.container.get_wrapped_container().attrs["State"]["Pid"]
    (tritonserver,) = [p for p in psutil.Process(init).children() if p.name() == "tritonserver"]
    outcomes: dict[str, Outcome] = {}
    kinds = [(p, known) for p in PROTOCOLS for known in (True, False)]
    ready = threading.Barrier(len(kinds) + 1)

    def send(protocol: str, known: bool) -> None:
        url = server.endpoints.url(protocol)
        client = TritonClient(url, protocol, server=server if known else None)  # type: ignore[arg-type]
        client.infer("add_one", x)
        ready.wait()
        name = f"TritonClient({'server=' if known else 'url'}) {protocol}"
        outcomes[f"in flight {name}"] = timed(lambda: client.infer("slow", x, ["Y"]))
        outcomes[f"next {name}"] = timed(lambda: client.infer("add_one", x))

    threads = [threading.Thread(target=send, args=kind) for kind in kinds]
    for t in threads:
        t.start()
    ready.wait()
    started = time.monotonic()
    time.sleep(1.0)
    os.kill(tritonserver.pid, sig)
    for t in threads:
        t.join(DEADLINE_S + 30)
    assert len(outcomes) == 2 * len(kinds)
    for what, outcome in outcomes.items():
        since = 1.0 if what.startswith("in flight") else 0.0
        assert_died(outcome, what, death_text("container", sig), since)
    assert time.monotonic() - started < 2 * DEADLINE_S
