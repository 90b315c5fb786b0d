"""Soak with a memory gate (--triton-soak, --perf-memory-growth-mb-per-min, --perf-p99-drift):
the figures on made-up samples, then a short real soak on two python-backend models, one that
leaks 256 kB per execution and the same without the leak, both at once, each on a server of
its own (the gate reads a whole server's memory). The master scrapes Triton's metrics
and the server's RSS (tritonserver and its python stubs, found by the port it listens on)
once a second; the leak is caught, the clean model passes."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_triton.base.urls import Endpoints
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.soak import (
    MB,
    SoakSample,
    slope_per_min,
    soak_figures,
    summarize,
    write_soak_plots,
)
from pytest_triton.load.measure.window_log import WindowLog
from pytest_triton.server import LocalLauncher, ServerArgs
from tests.helpers.locust_runs import REPO, Locust, locust_args
from tests.helpers.probe_models import CLEAN_MODEL, LEAK_KB, LEAKY_MODEL, write_sleepy

RATE_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "rate.py"
METRICS = """# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="a",version="1"} 10
nv_inference_request_success{model="b",version="1"} 5
nv_inference_request_duration_us{model="a",version="1"} 2000
nv_cpu_utilization 0.5
nv_cpu_memory_used_bytes 1048576000
nv_gpu_utilization{gpu_uuid="GPU-0"} 0.2
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.4
nv_gpu_memory_used_bytes{gpu_uuid="GPU-0"} 100
nv_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 300
"""


def test_metrics_are_summed_over_models_and_devices() -> None:
    figures = summarize(METRICS)
    assert figures["nv_inference_request_success"] == 15
    assert figures["nv_gpu_memory_used_bytes"] == 400
    assert figures["nv_gpu_utilization"] == pytest.approx(0.3)
    assert figures["nv_cpu_memory_used_bytes"] == 1000 * MB
    assert "nv_gpu_power_usage" not in figures


def test_memory_growth_is_the_slope_of_the_steady_part(tmp_path: Path) -> None:
    """30 s after the warm-up: 20 MB of start-up growth in the first third, then 2 MB/s."""
    start = 1000.0
    samples = []
    for i in range(31):
        mb = 400 + min(i, 10) * 2 + max(0, i - 10) * 2
        samples.append(SoakSample(start + i, {}, int(mb * MB)))
    log = WindowLog()
    for i in range(300):  # p99 doubles from the first third to the last
        log.record(start + i / 10, "m", 10.0 if i < 150 else 20.0, True, 1)
    figures = soak_figures(samples, log, start, start + 30)
    assert figures.memory_source == "rss"
    assert figures.memory_growth_mb_per_min == pytest.approx(120)
    assert figures.p99_drift_pct == pytest.approx(100, abs=0.2)  # the histogram's 0.1%
    assert math.isnan(slope_per_min([(0, 1), (1, 2)]))
    flat = soak_figures([SoakSample(start + i, {}, 400 * MB) for i in range(31)], log, start, 1030)
    assert flat.memory_growth_mb_per_min == 0
    names = write_soak_plots(figures, log, start, start + 30, tmp_path / "load-x", {})
    assert names == ["load-x-memory.png", "load-x-latency.png"]
    assert all((tmp_path / n).stat().st_size > 1000 for n in names)
    measured = tg.Measured(10, 0, 10, 1, 1, 1, 1, memory_growth_mb_per_min=120, p99_drift_pct=100)
    checks = tg.evaluate(tg.Targets(perf_memory_growth_mb_per_min=60, perf_p99_drift=50), measured)
    assert [c.name for c in tg.failures(checks)] == [
        "perf_memory_growth_mb_per_min",
        "perf_p99_drift",
    ]


# -- a real soak ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def soak_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Endpoints]]:
    """One server per model: the memory gate reads a whole server's RSS, so the two soaks
    run at the same time, each on a server of its own."""
    with contextlib.ExitStack() as stack:
        servers = {}
        for model, source in (("leaky", LEAKY_MODEL), ("clean", CLEAN_MODEL)):
            root = tmp_path_factory.mktemp(model)
            write_sleepy(root, model, source=source)
            args = ServerArgs(root, model_control_mode="none")
            servers[model] = stack.enter_context(LocalLauncher().start(args)).endpoints
        yield servers


RATE = 20  # req/s: the leak grows 20 x 256 kB = 5 MB/s, 300 MB/min
LIMIT_MB_PER_MIN = 60


def soak(endpoints: Endpoints, model: str, tmp_path: Path) -> Locust:
    report = tmp_path / f"soak-{model}.json"
    args = locust_args(
        RATE_LOCUSTFILE,
        "OpenUser",
        "--headless",
        "-u",
        "1",
        "-t",
        "20s",
        "--host",
        f"http://{endpoints.http}",
        "--triton-model",
        model,
        "--triton-request-rate",
        str(RATE),
        "--triton-soak",
        "--triton-metrics-url",
        f"http://{endpoints.metrics}/metrics",
        "--perf-memory-growth-mb-per-min",
        str(LIMIT_MB_PER_MIN),
        report=report,
    )
    return Locust(args, report)


def finished(run: Locust) -> dict:
    done = run.finish(timeout=120)
    assert done.report is not None, done.tail()
    return {**done.report, "code": done.code, "output": done.output}


@pytest.mark.load
@pytest.mark.triton
def test_a_leak_is_caught_and_a_clean_model_passes(
    soak_servers: dict[str, Endpoints], tmp_path: Path
) -> None:
    runs = {model: soak(endpoints, model, tmp_path) for model, endpoints in soak_servers.items()}
    clean, leaky = finished(runs["clean"]), finished(runs["leaky"])
    print(
        f"memory growth: clean {clean['soak']['memory_growth_mb_per_min']:+.1f} MB/min, "
        f"leaky {leaky['soak']['memory_growth_mb_per_min']:+.1f} MB/min "
        f"(leak {RATE * LEAK_KB / 1024 * 60:.0f} MB/min)"
    )
    for run in (clean, leaky):
        assert run["soak"]["memory_source"] == "rss", run["output"][-3000:]
        assert len(run["soak"]["samples"]) >= 15, run["soak"]["samples"]
        assert run["measured"]["failures"] == 0
        sample = run["soak"]["samples"][-1]
        assert sample["nv_inference_request_success"] > 0 and sample["rss"] > 50 * MB
        assert all((tmp_path / name).is_file() for name in run["figures"]), run["figures"]
        assert len(run["figures"]) == 2
    assert clean["code"] == 0, clean["output"][-3000:]
    assert clean["soak"]["memory_growth_mb_per_min"] < LIMIT_MB_PER_MIN / 3
    assert leaky["code"] == 1, leaky["output"][-3000:]
    assert leaky["soak"]["memory_growth_mb_per_min"] > 2 * LIMIT_MB_PER_MIN
    assert "RESULT: FAIL - perf_memory_growth_mb_per_min (MB/min) measured" in leaky["output"]
