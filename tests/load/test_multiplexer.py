"""The load multiplexer (one greenlet driving every closed-loop user's connection) against a
real server, on both protocols: every request is counted once with the failure a blocking
send would raise, a rejection keeps its connection, a request past its timeout fails as a
timeout, Locust's other greenlets keep running, and stopped users leave no connection."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.local import LocalServer
from tests.helpers.locust_runs import REPO, probe_report, subprocess_env
from tests.helpers.probe_models import write_sleepy

pytestmark = [pytest.mark.load, pytest.mark.triton]
# http-python: answers read in Python where the C pump is built; grpc-shared: gRPC users' streams
# on one connection
PROTOCOLS = ("http", "http-python", "grpc", "grpc-shared")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("repo")
    write_sleepy(root)
    write_sleepy(root, "roomy", max_batch_size=4096)  # room for large requests
    with LocalLauncher().start(ServerArgs(Path(root), model_control_mode="none")) as server:
        yield probe_report(
            "tests.helpers.multiplexer_probe", server.endpoints.http, server.endpoints.grpc
        )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_answer_and_each_rejection_is_counted_once(
    report: dict[str, Any], protocol: str
) -> None:
    """Each user alternates an accepted and a rejected request: both kinds are counted, in
    equal numbers give or take the request each user had in flight when it stopped."""
    run = report[f"mixed-{protocol}"]
    outcomes = dict(run["outcomes"])
    ok = outcomes.pop("ok", 0)
    assert ok >= 8, run  # 4 users x 2 s at 20 ms a request, one model instance
    assert len(outcomes) == 1, run
    ((rejection, failures),) = outcomes.items()
    assert rejection.startswith("InferenceError") and "'x'" in rejection, rejection
    assert "sleepy" in rejection and protocol[:4] in rejection.lower(), rejection
    assert abs(ok - failures) <= 4, run
    assert run["sizes"] and min(run["sizes"]) > 0, run  # the answer's bytes


@pytest.mark.parametrize("protocol", ("grpc", "grpc-shared"))
def test_requests_larger_than_the_servers_windows_all_go_through(
    report: dict[str, Any], protocol: str
) -> None:
    """Four users' requests of 67 kB, over HTTP/2's initial 64 KiB windows: what does not fit
    waits in the connection until the driver reads the server's WINDOW_UPDATE. (A send that
    waited by reading the socket itself failed the users' first sends on a shared connection,
    each in its own greenlet: gevent's ConcurrentObjectUseError; and it could take the
    answers other streams waited for: a DLRM run at batch 256 sent nothing for 30 s.)"""
    run = report[f"large-{protocol}"]
    assert set(run["outcomes"]) == {"ok"}, run
    assert run["outcomes"]["ok"] >= 20, run  # 4 users x 2 s at 20 ms a request, one instance
    assert len(run["sizes"]) == 1 and run["sizes"][0] > 2100 * 4 * 4, run  # y: FP32 [2100, 4]
    assert run["connections_after"] == 0 and run["lanes_after"] == 0, run


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rejection_keeps_its_connection_and_stopped_users_leave_none(
    report: dict[str, Any], protocol: str
) -> None:
    run = report[f"mixed-{protocol}"]
    assert run["connections_opened"] == 4, run  # each lane's first send
    assert run["connections_during"] == (1 if protocol.endswith("shared") else 4), run
    assert run["connections_after"] == 0 and run["lanes_after"] == 0, run


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_past_its_timeout_fails_as_a_timeout(
    report: dict[str, Any], protocol: str
) -> None:
    """A 5 ms timeout against a model that takes 20 ms: no answer is awaited past it (gRPC's
    server may also say DEADLINE_EXCEEDED first: its grpc-timeout header), and the user goes
    on; stopping leaves no connection."""
    run = report[f"timeout-{protocol}"]
    outcomes = dict(run["outcomes"])
    assert "ok" not in outcomes, run
    for failure in outcomes:
        assert failure.startswith("InferenceError") and "within 0.005s" in failure, failure
    assert sum(outcomes.values()) >= 4, run  # both users failed and went on
    assert run["connections_after"] == 0 and run["lanes_after"] == 0, run


@pytest.mark.skipif(
    importlib.util.find_spec("pytest_triton.client.wire._http_pump") is None,
    reason="the C pump was not built at install (it needs gcc and the Python headers: "
    "pip install -e . builds it where they are)",
)
@pytest.mark.parametrize("run_name", ["mixed-http", "timeout-http"])
def test_plain_http_answers_are_read_by_the_c_pump(report: dict[str, Any], run_name: str) -> None:
    """The runs above over HTTP went through the pump (its successes and, handed back, its
    rejections and timeouts), and their -python twins did not."""
    assert report[run_name]["pumped"] > 0, report[run_name]
    assert report[f"{run_name}-python"]["pumped"] == 0, report[f"{run_name}-python"]


@pytest.mark.parametrize(
    "run_name", ["mixed-http", "mixed-http-python", "mixed-grpc", "mixed-grpc-shared"]
)
def test_the_rest_of_the_process_keeps_running(report: dict[str, Any], run_name: str) -> None:
    """The driver waits in epoll with gevent's hub stopped, briefly: a greenlet ticking every
    10 ms (as Locust's statistics, web UI and run monitor do, more slowly) still runs."""
    run = report[run_name]
    assert run["ticks"] >= 50, run  # 2 s of 10 ms sleeps: ~200 on a quiet machine
    assert run["max_tick_gap_s"] < 0.5, run


def test_a_dropped_shared_connection_fails_every_stream_at_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Four users' streams on one gRPC connection, and the server killed: every user's request
    fails within a second of the first (the lane that read the failure tells the others; not
    at their 30-s timeout), and the users go on."""
    root = tmp_path_factory.mktemp("repo")
    write_sleepy(root)
    with LocalLauncher().start(ServerArgs(Path(root), model_control_mode="none")) as server:
        assert isinstance(server, LocalServer)
        probe = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.helpers.multiplexer_probe",
                "--death",
                server.endpoints.grpc,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=subprocess_env(),
        )
        try:
            assert probe.stdout is not None
            assert probe.stdout.readline().strip() == "loading", probe.stderr
            server.process.kill()
            out, err = probe.communicate(timeout=60)
        finally:
            probe.kill()
    assert probe.returncode == 0, err[-3000:]
    run = json.loads(out.strip().splitlines()[-1])
    assert run["users failed"] == 4, run
    assert run["spread_s"] < 1.0, run
    assert run["lanes_after"] == 0, run
