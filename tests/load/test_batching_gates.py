"""Release gates of the batching features on this CPU machine, with Locust in a subprocess.

Figures are relative (ratios, a known service time) because absolute throughput on a shared
2-core machine is not reproducible; the margins below are set under what was measured.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_triton.load.runner.embedded import EmbeddedServer, zoo_model
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import Endpoints
from tests.helpers.locust_runs import (
    LOCUSTFILES,
    PROBE_LOCUSTFILE,
    REPO,
    Locust,
    run_locust,
    subprocess_env,
    triton_perf_args,
)
from tests.helpers.probe_models import LAUNCH_MS, SLEEP_MS, write_launch_bound, write_sleepy

pytestmark = [pytest.mark.load, pytest.mark.triton]

# The throughput gate runs on a model whose execution costs LAUNCH_MS whatever its batch
# size (a launch-bound GPU kernel, where the tutorial's gain comes from): 16 users of batch-2
# requests give one request per execution without batching and ~8 with it. Measured on this
# 2-core machine: x7.45-x7.48 in four runs, one of them beside a busy-looping process; the
# gate asks for x3, far from CPU noise. DLRM itself (a real model, CPU-bound here) is run
# too, for the statistics and the printed ratio only: on 2 cores shared with Locust its gain
# swung from x0.7 to x1.8 between runs (x1.02 and x1.26 in two idle runs).
MIN_BATCHING_GAIN = 3.0


@pytest.fixture(scope="module")
def batching_pair() -> Iterator[Endpoints]:
    """Two servers' worth of models on one server: the launch-bound model and DLRM (the zoo's
    small config, ONNX hosted), each with and without dynamic batching, one instance each
    (the tutorial's "no dynamic batching, single model instance" baseline)."""
    server = EmbeddedServer(
        [
            zoo_model("dlrm", model_name="dlrm_batching", instance_count=1),
            zoo_model(
                "dlrm", model_name="dlrm_nobatching", instance_count=1, dynamic_batching=None
            ),
        ],
        progress=lambda _: None,
    )
    try:
        endpoints = server.start()
        assert server.repository is not None and server.deployment is not None
        client = server.deployment.client("http")
        for model, batching in (("launch_on", True), ("launch_off", False)):
            write_launch_bound(server.repository.root, model, batching=batching)
            client.load_model(model)
        yield endpoints
    finally:
        server.stop()


def _load(endpoints: Endpoints, locustfile: Path, model: str, tmp_path: Path) -> dict[str, Any]:
    run = run_locust(
        locustfile,
        "--headless",
        "-u",
        "16",
        "-r",
        "16",
        "-t",
        "3s",
        "--host",
        f"http://{endpoints.http}",
        "--triton-model",
        model,
        "--triton-batch-size",
        "2",
        tmp_path=tmp_path,
    )
    assert run.code == 0, run.tail()
    assert run.report is not None
    return run.report


def _on_off(
    endpoints: Endpoints, locustfile: Path, on: str, off: str, tmp_path: Path
) -> tuple[float, str]:
    """Off, on, on, off (a drifting background load hits both alike); the statistics must
    show one request per execution without batching and combined requests with it."""
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for kind in ("off", "on", "on", "off"):
        runs[kind].append(_load(endpoints, locustfile, on if kind == "on" else off, tmp_path))
    for report in runs["off"]:
        (server,) = report["server"]
        assert set(server["batch_histogram"]) == {"2"}, server
        assert server["execution_count"] == server["success_count"], server
    for report in runs["on"]:
        (server,) = report["server"]
        assert server["execution_count"] < server["success_count"] / 2, server
        assert max(int(b) for b in server["batch_histogram"]) >= 8, server
    on_rate = sum(r["measured"]["throughput"] for r in runs["on"]) / 2
    off_rate = sum(r["measured"]["throughput"] for r in runs["off"]) / 2
    gain = on_rate / off_rate
    return gain, f"batching on {on_rate:.0f} samples/s vs off {off_rate:.0f}: x{gain:.2f}"


def test_dynamic_batching_raises_throughput_of_a_launch_bound_model(
    batching_pair: Endpoints, tmp_path: Path
) -> None:
    gain, summary = _on_off(batching_pair, PROBE_LOCUSTFILE, "launch_on", "launch_off", tmp_path)
    print(f"launch-bound model ({LAUNCH_MS} ms per execution): {summary}")
    assert gain >= MIN_BATCHING_GAIN, summary


def test_dynamic_batching_combines_dlrm_requests(batching_pair: Endpoints, tmp_path: Path) -> None:
    gain, summary = _on_off(
        batching_pair,
        LOCUSTFILES / "dlrm.py",
        "dlrm_batching_onnx",
        "dlrm_nobatching_onnx",
        tmp_path,
    )
    print(f"DLRM (CPU-bound here, ratio not gated): {summary}")
    assert gain > 0


@pytest.fixture(scope="module")
def sleepy_server() -> Iterator[Endpoints]:
    root = Path(tempfile.mkdtemp(prefix="pytest-triton-sleepy-"))
    write_sleepy(root)
    try:
        with LocalLauncher().start(
            ServerArgs(root, model_control_mode="none", startup_timeout_s=60)
        ) as server:
            yield server.endpoints
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_latency_bound_search_finds_the_largest_concurrency(
    sleepy_server: Endpoints, tmp_path: Path
) -> None:
    """The DLRM example's analysis ("a 20 ms bound allows 8 concurrent requests") on a model
    whose answer is known: one instance sleeping 20 ms per request has p99 ~ 20 ms x c, so a
    90 ms bound allows 4 concurrent requests at ~50 requests/s."""
    out = tmp_path / "sweep"
    cmd = [
        *triton_perf_args("tests.helpers.probe_models:probe_spec"),
        "--url",
        f"http://{sleepy_server.http}",
        "--model-name",
        "sleepy",
        "-b",
        "1",
        "--concurrency-range",
        "1:16",
        "--latency-bound",
        "90",
        "--search",
        "-p",
        "1500",
        "--warmup",
        "300",
        "-f",
        str(out / "sweep.csv"),
        "--markdown",
        str(out / "sweep.md"),
        "--plot",
        str(out / "sweep.png"),
        "--json",
        str(out / "sweep.json"),
        "--no-progress",
    ]
    finished = Locust(cmd, env=subprocess_env()).finish(timeout=150)
    assert finished.code == 0, finished.tail()
    result = json.loads((out / "sweep.json").read_text())
    best = result["within_bound"]["1"]
    assert best is not None and best["concurrency"] in (3, 4), best
    # Doubling until the bound breaks at 8, then bisecting 4..8 (or 2..4 when a noisy
    # machine pushed p99 at 4 over the bound).
    measured = sorted(p["concurrency"] for p in result["points"])
    assert measured == {4: [1, 2, 4, 5, 6, 8], 3: [1, 2, 3, 4]}[best["concurrency"]], measured
    service_rate = 1000 / SLEEP_MS
    assert 0.7 * service_rate <= best["throughput"] <= 1.05 * service_rate, best
    assert "p99 latency bound 90 ms: up to" in finished.stdout
    header = (out / "sweep.csv").read_text().splitlines()[0].split(",")
    assert header[:14] == [  # perf_analyzer 2.51's -f columns, then ours
        "Concurrency",
        "Inferences/Second",
        "Client Send",
        "Network+Server Send/Recv",
        "Server Queue",
        "Server Compute Input",
        "Server Compute Infer",
        "Server Compute Output",
        "Client Recv",
        "p50 latency",
        "p90 latency",
        "p95 latency",
        "p99 latency",
        "Avg latency",
    ]
    assert (out / "sweep.md").read_text().startswith("| **Concurrency** | **Throughput** |")
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_refuses_a_bad_range() -> None:
    done = subprocess.run(
        [
            *triton_perf_args("mnist"),
            "--concurrency-range",
            "8:2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )
    assert done.returncode == 2
    assert "START[:END[:STEP]]" in done.stderr
