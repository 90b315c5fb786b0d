"""Locust runs end to end, each in a subprocess under a hard timeout: HTTP and gRPC users under
gevent, SIGTERM, distributed modes, bounds, host refusal, and a failing target (the web UI:
test_web_ui.py)."""

from __future__ import annotations

import csv
import json
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from pytest_triton import TritonClient
from pytest_triton.client.wire.shm import cuda_problem, our_regions
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import Endpoints
from tests.helpers.known_latencies import assert_within_precision, exact_percentile, latencies_us
from tests.helpers.locust_runs import (
    LOCUSTFILES,
    PROBE_LOCUSTFILE,
    Locust,
    free_port,
    locust_args,
    run_locust,
    subprocess_env,
    triton_perf_args,
    tritonservers,
)
from tests.helpers.raw_models import write_bytes_model

LOCUSTFILES_FOR_TESTS = PROBE_LOCUSTFILE.parent
KNOWN_LATENCY_LOCUSTFILE = LOCUSTFILES_FOR_TESTS / "known_latency.py"

pytestmark = [pytest.mark.load, pytest.mark.triton]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_users_keep_requests_in_flight_together(
    protocol: str, probe_server: Endpoints, tmp_path: Path
) -> None:
    """8 users must have 8 requests in flight: the probe model batches what waits together, so
    batches of ~8 prove it; a generator that serializes (a naive gRPC user under gevent, which
    blocks the hub for each call) would only ever show batches of 1. The run lasts its whole
    -t (Locust's timer once fired early by the time the process took to start) and Locust's
    own CSV counts the requests too."""
    host = f"{protocol}://{probe_server.url(protocol)}"
    run = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "4s",
        "--host",
        host,
        "--csv",
        str(tmp_path / "run"),
        tmp_path=tmp_path,
    )
    assert run.code == 0, run.tail()
    assert run.report is not None
    measured = run.report["measured"]
    assert measured["requests"] > 50 and measured["failures"] == 0, run.tail()
    assert measured["duration_s"] > 3.5, measured
    (server,) = run.report["server"]
    assert server["model"] == "probe_onnx"
    assert server["avg_batch_size"] >= 4, server
    assert "RESULT: PASS" in run.stdout
    assert "Avg request latency:" in run.stdout and "Batch size histogram" in run.stdout
    with (tmp_path / "run_stats.csv").open() as f:
        stats = {row["Name"]: row for row in csv.DictReader(f)}
    # response_length is the answer's size on the wire: the probe's 4 float32 (16 bytes) per
    # sample and their framing (HTTP's JSON header, gRPC's ModelInferResponse fields)
    assert 16 < float(stats["probe_onnx"]["Average Content Size"]) < 1024, stats
    assert measured["samples"] == measured["requests"]  # batch size 1, no failure
    with (tmp_path / "run_triton.csv").open() as f:
        triton = {row["Name"]: row for row in csv.DictReader(f)}
    assert int(triton["probe_onnx"]["Samples"]) == measured["samples"], triton
    assert float(triton["probe_onnx"]["Samples/s"]) == pytest.approx(
        measured["throughput"], rel=1e-3
    )
    assert int(triton["probe_onnx"]["Server Execution Count"]) > 0


def test_bytes_tensors_under_load_on_both_protocols(tmp_path: Path) -> None:
    """Object arrays of bytes go out through the same request path as numbers; with
    --triton-protocol http,grpc the users take the protocols in turn."""
    write_bytes_model(tmp_path / "repo")
    with LocalLauncher().start(ServerArgs(tmp_path / "repo", model_control_mode="none")) as srv:
        run = run_locust(
            LOCUSTFILES_FOR_TESTS / "bytes_echo.py",
            "--headless",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "3s",
            "--host",
            f"http://{srv.endpoints.http}",
            "--triton-grpc-url",
            f"grpc://{srv.endpoints.grpc}",
            "--triton-protocol",
            "http,grpc",
            "--csv",
            str(tmp_path / "run"),
            tmp_path=tmp_path,
        )
    assert run.code == 0, run.tail()
    assert run.report is not None
    assert run.report["measured"]["requests"] > 20 and run.report["measured"]["failures"] == 0
    stats = (tmp_path / "run_stats.csv").read_text()
    assert "HTTP,echo_bytes" in stats and "gRPC,echo_bytes" in stats, stats


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_users_over_shared_memory_register_once_and_leave_nothing(
    protocol: str, probe_server: Endpoints, tmp_path: Path
) -> None:
    """--triton-shared-memory system: each user registers one region with the server before
    its first request (the server lists them while the run goes on), every request succeeds,
    and when Locust exits the regions are unregistered and gone from /dev/shm."""
    report = tmp_path / "report.json"
    run = Locust(
        locust_args(
            PROBE_LOCUSTFILE,
            "--headless",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--host",
            f"{protocol}://{probe_server.url(protocol)}",
            "--triton-shared-memory",
            "system",
            report=report,
        ),
        report,
    )
    run.wait_for("All users spawned", timeout=120)
    time.sleep(1)
    admin = TritonClient(probe_server.http, "http")
    prefix = f"pytest_triton_{run.proc.pid}_c"
    during = [
        r["name"]
        for r in admin.control.tritonclient.get_system_shared_memory_status()
        if r["name"].startswith(prefix)
    ]
    finished = run.finish(timeout=60)
    assert finished.code == 0, finished.tail()
    assert len(during) == 4, during
    assert "tensors travel through system shared memory" in finished.output
    assert finished.report is not None
    measured = finished.report["measured"]
    assert measured["requests"] > 20 and measured["failures"] == 0, measured
    after = [
        r["name"]
        for r in admin.control.tritonclient.get_system_shared_memory_status()
        if r["name"].startswith(prefix)
    ]
    assert after == [] and our_regions(run.proc.pid) == []


def test_triton_perf_over_shared_memory(probe_server: Endpoints, tmp_path: Path) -> None:
    """Also: on a fast model (full batches of 8 run at once, no batching delay) the point's
    percentiles have microsecond resolution (p50 below p99, not one whole-ms bucket), in the
    JSON, the printed table and perf_analyzer's CSV columns (whole us)."""
    out = tmp_path / "perf.json"
    table = tmp_path / "perf.csv"
    cmd = [
        *triton_perf_args("tests.helpers.probe_models:probe_spec"),
        "--url",
        f"grpc://{probe_server.grpc}",
        "--model-name",
        "probe_onnx",
        "-b",
        "8",
        "--concurrency-range",
        "2",
        "-p",
        "1500",
        "--warmup",
        "300",
        "--max-trials",
        "4",
        "--shared-memory",
        "system",
        "--json",
        str(out),
        "-f",
        str(table),
        "--no-progress",
    ]
    finished = Locust(cmd, env=subprocess_env()).finish(timeout=120)
    assert finished.code == 0, finished.tail()
    assert "tensors travel through system shared memory" in finished.stderr
    (point,) = json.loads(out.read_text())["points"]
    assert point["requests"] > 10 and point["failures"] == 0, point
    assert 0 < point["p50_ms"] < point["p99_ms"] < 100, point
    assert not float(point["p50_ms"]).is_integer() or not float(point["p99_ms"]).is_integer()
    assert point["latency_histogram"].startswith("HISTF")  # HdrHistogram's base64 text
    with open(table, newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert int(row["p50 latency"]) < int(row["p99 latency"]) == round(point["p99_ms"] * 1e3)
    # the markdown table prints 3 significant digits: "| 1.23 ms |", not "| 1 ms |"
    print(finished.stdout[-1500:])  # what was measured, for the log
    printed = re.search(
        r"\| [\d,.]+ infer/s[^|]*\| ([\d.]+) ms \| ([\d.]+) ms \| ([\d.]+) ms \|", finished.stdout
    )
    assert printed is not None, finished.stdout[-2000:]
    assert all(len(v.replace(".", "").lstrip("0")) == 3 for v in printed.groups()), printed
    status = TritonClient(
        probe_server.http, "http"
    ).control.tritonclient.get_system_shared_memory_status()
    assert [r["name"] for r in status] == [], "the generator's regions outlived it"


def test_cuda_shared_memory_is_refused_before_any_load(tmp_path: Path) -> None:
    problem = cuda_problem()
    if problem is None:
        pytest.skip("this machine can use CUDA shared memory")
    run = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "1",
        "-t",
        "2s",
        "--triton-shared-memory",
        "cuda",
        tmp_path=tmp_path,
        timeout=60,
    )
    assert run.code == 2, run.tail()
    assert f"--triton-shared-memory cuda: {problem}" in run.output
    assert "starting an embedded tritonserver" not in run.output


def test_sigterm_stops_grpc_load_and_the_embedded_server(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    run = Locust(
        locust_args(
            PROBE_LOCUSTFILE,
            "--headless",
            "-u",
            "8",
            "-r",
            "8",
            "-t",
            "300s",
            "--triton-protocol",
            "grpc",
            report=report,
        ),
        report,
    )
    run.wait_for("All users spawned", timeout=120)
    time.sleep(2)
    children = run.descendants()
    (server,) = tritonservers(children)
    repository = next(
        a.split("=", 1)[1] for a in server.cmdline() if a.startswith("--model-repository=")
    )
    run.proc.send_signal(signal.SIGTERM)
    finished = run.finish(timeout=40)  # the server's own graceful stop takes up to ~10 s
    assert finished.code == 0, finished.tail()
    assert "RESULT: PASS" in finished.stdout
    assert finished.report is not None and finished.report["measured"]["requests"] > 0
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"left running after SIGTERM: {alive}"
    assert not Path(repository).exists(), "the embedded repository was left behind"


def test_a_dead_embedded_server_ends_the_run_at_once(tmp_path: Path) -> None:
    """Once the server is dead every request fails at once: the run stops (instead of
    spinning on failures until -t), says why, and fails."""
    report = tmp_path / "report.json"
    run = Locust(
        locust_args(
            PROBE_LOCUSTFILE, "--headless", "-u", "4", "-r", "4", "-t", "300s", report=report
        ),
        report,
    )
    run.wait_for("All users spawned", timeout=120)
    (server,) = tritonservers(run.descendants())
    killed = time.monotonic()
    server.send_signal(signal.SIGKILL)
    finished = run.finish(timeout=90)
    assert time.monotonic() - killed < 30, "the run went on after its server died"
    assert finished.code == 1, finished.tail()
    assert (
        "the server died: tritonserver (local) exited with code -9 (killed by SIGKILL), "
        "stopping the test"
    ) in finished.output, finished.tail()
    assert "RESULT: FAIL" in finished.stdout
    assert finished.report is not None and finished.report["measured"]["failures"] > 0


def test_processes_mode_with_embedded_server(tmp_path: Path) -> None:
    """--processes forks workers after the locustfile import: gRPC's gevent mode, set at import,
    must hold in every child, and only the master may start the server. The master listens
    on loopback at a free port (Locust's default, every interface at 5557, collides with any
    other run on the machine). The workers' request logs reach the master with their reports:
    its measurement windows hold their requests. (How many windows fit depends on when the
    forked workers send their first request: on a loaded machine that is 2 s after the start,
    and the warm-up then shrinks to leave room; two windows are asked, which is what a 6-s run
    leaves even then.)"""
    port = free_port()
    run = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "6s",
        "--processes",
        "2",
        "--triton-protocol",
        "grpc",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
        "--master-port",
        str(port),
        "--triton-measurement-interval",
        "1000",
        "--triton-load-warmup",
        "500",
        tmp_path=tmp_path,
        timeout=120,
    )
    assert run.code == 0, run.tail()
    assert run.report is not None and run.report["measured"]["requests"] > 50
    assert run.report["host"].startswith("grpc://127.0.0.1:")
    assert run.output.count("starting an embedded tritonserver") == 1
    assert run.report["server"][0]["avg_batch_size"] > 1
    windows = run.report["windows"]
    assert len(windows) >= 2 and all(w["requests"] > 0 for w in windows), windows
    assert sum(w["requests"] for w in windows) < run.report["measured"]["requests"]
    # the workers' sample counts reach the master (batch size 1: one sample per request)
    assert run.report["measured"]["samples"] == run.report["measured"]["requests"]


def test_master_and_worker_processes(tmp_path: Path) -> None:
    """The worker gets the embedded server's URL from the master (with its options)."""
    port = free_port()
    report = tmp_path / "report.json"
    master = Locust(
        locust_args(
            PROBE_LOCUSTFILE,
            "--headless",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "4s",
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            "1",
            report=report,
        ),
        report,
    )
    worker = Locust(
        locust_args(
            PROBE_LOCUSTFILE, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)
        )
    )
    done = master.finish(timeout=120)
    worker_done = worker.finish(timeout=30)
    assert done.code == 0, done.tail()
    assert worker_done.code == 0, worker_done.tail()
    assert done.report is not None and done.report["measured"]["requests"] > 20
    assert "starting an embedded tritonserver" not in worker_done.output


def test_master_merges_its_workers_latency_histograms(tmp_path: Path) -> None:
    """A real master and two worker processes whose users report known latencies (no server:
    request events with set response times): 1.000-1.999 ms on one worker, 5.000-5.999 ms on
    the other. The master's whole-run percentiles are those of all 4000 requests together, to
    within the histogram's precision (3 significant digits, us resolution), not whole ms."""
    port = free_port()
    report = tmp_path / "report.json"
    master = Locust(
        locust_args(
            KNOWN_LATENCY_LOCUSTFILE,
            "--headless",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "8s",
            "--host",
            f"http://127.0.0.1:{free_port()}",  # loopback, nothing listening
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            "2",
            report=report,
        ),
        report,
    )
    bases = (1000, 5000)
    workers = [
        Locust(
            locust_args(
                KNOWN_LATENCY_LOCUSTFILE,
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(port),
            ),
            env=subprocess_env(KNOWN_LATENCY_BASE_US=str(base)),
        )
        for base in bases
    ]
    done = master.finish(timeout=120)
    for worker in workers:
        assert worker.finish(timeout=30).code == 0
    assert done.report is not None, done.tail()
    measured = done.report["measured"]
    # Locust gives each worker 2 of the 4 users; each user reports 1000 latencies
    every_ms = [us / 1000 for base in bases for us in latencies_us(base) * 2]
    assert measured["requests"] == len(every_ms) == 4000, done.tail()
    assert measured["samples"] == 4000  # the log counted each request once, from its worker
    assert measured["avg_ms"] == pytest.approx(sum(every_ms) / len(every_ms))
    for p in (50, 95, 99):
        assert_within_precision(measured[f"p{p}_ms"], exact_percentile(every_ms, p))
    assert 1.9 < measured["p50_ms"] < 2.0 and 5.9 < measured["p99_ms"] < 6.0, measured
    windows = done.report["windows"]
    assert sum(w["requests"] for w in windows) <= 4000
    assert all("latency_histogram" in w for w in windows)


def test_refuses_a_non_loopback_host(tmp_path: Path) -> None:
    run = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "1",
        "-t",
        "2s",
        "--host",
        "http://192.0.2.10:8000",
        tmp_path=tmp_path,
        timeout=60,
    )
    assert run.code == 2, run.tail()
    assert "refusing to send load to http://192.0.2.10:8000" in run.output
    assert "--triton-allow-remote" in run.output


def test_max_requests_bounds_a_run_without_run_time(
    probe_server: Endpoints, tmp_path: Path
) -> None:
    run = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "4",
        "-r",
        "4",
        "--triton-max-requests",
        "200",
        "--host",
        f"http://{probe_server.http}",
        tmp_path=tmp_path,
        timeout=60,
    )
    assert run.code == 0, run.tail()
    assert "no --run-time given" in run.output
    assert "--triton-max-requests 200 reached" in run.output
    assert run.report is not None
    assert 200 <= run.report["measured"]["requests"] < 5000
    assert run.report["measured"]["duration_s"] < 25


def test_an_unmeetable_target_fails_the_run_and_names_it(tmp_path: Path) -> None:
    """A zoo locustfile on its embedded server: one target from the command line, one from the
    environment; both impossible."""
    env = subprocess_env(TRITON_PERF_THROUGHPUT="1e12")
    run = run_locust(
        LOCUSTFILES / "dlrm.py",
        "--headless",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "3s",
        "--perf-latency-p99",
        "0.001",
        tmp_path=tmp_path,
        env=env,
        timeout=120,
    )
    assert run.code == 1, run.tail()
    verdict = run.stdout[run.stdout.index("Verdict") :]
    assert "RESULT: FAIL" in verdict
    # (a run that measured nothing fails too: its output says why none was measured)
    assert "perf_throughput (samples/s) measured" in verdict, run.tail(120)
    assert "perf_latency_p99 (ms) measured" in verdict
    assert run.report is not None and not run.report["passed"]
    # -t counts from the start of the load, not from before the embedded server's export
    assert run.report["measured"]["duration_s"] > 2.5, run.report["measured"]
    failed = {c["name"] for c in run.report["checks"] if c["passed"] is False}
    assert failed == {"perf_throughput", "perf_latency_p99"}
