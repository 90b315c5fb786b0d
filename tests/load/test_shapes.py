"""Traffic shapes (--triton-shape steps|ramp|spike|replay) and the verdict per stage: the
stages on paper, then real Locust runs on a model of known speed (`sleepy`: 20 ms a request,
one instance, no batching, so c users in flight wait ~20 ms x c)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.urls import Endpoints
from pytest_triton.load.measure.stages import (
    Arrival,
    judge_stages,
    load_at,
    read_trace,
    stages_of,
    stages_table,
)
from pytest_triton.load.measure.window_log import WindowLog
from tests.helpers.locust_runs import REPO, run_locust

RATE_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "rate.py"


def test_stages_of_each_shape() -> None:
    steps = stages_of(resolve(shape="steps", shape_steps=(2.0, 4.0, 8.0), shape_step_s=10.0))
    assert [(s.start_s, s.load, s.unit) for s in steps] == [
        (0, 2, "users"),
        (10, 4, "users"),
        (20, 8, "users"),
    ]
    assert load_at(steps, 15) == 4 and load_at(steps, 30) is None
    ramp = stages_of(resolve(shape="ramp", shape_steps=(2.0, 8.0), shape_step_s=10.0))
    assert load_at(ramp, 5) == pytest.approx(5) and load_at(ramp, 15) == 8
    assert ramp[0].label == "2 -> 8 users"
    spike = stages_of(resolve(shape="spike", shape_steps=(2.0, 16.0), request_rate=1.0))
    assert [s.label for s in spike] == ["2 req/s", "16 req/s", "2 req/s"]
    assert stages_of(resolve()) == []


def test_a_trace_is_read_and_cut_into_stages(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,batch_size\n0.5,1\n0.1,2\n\n1.5,4\n2.0,1\n")
    arrivals = read_trace(trace)
    assert arrivals == [Arrival(0.1, 2), Arrival(0.5, 1), Arrival(1.5, 4), Arrival(2.0, 1)]
    config = resolve(shape="replay", replay=str(trace), shape_step_s=1.0)
    assert [s.load for s in stages_of(config, arrivals)] == [2, 1, 1]
    trace.write_text("0.5,1\n1.0,x\n")
    with pytest.raises(ConfigError, match="row 2"):
        read_trace(trace)
    with pytest.raises(ConfigError, match="--triton-replay"):
        resolve(shape="replay")


def test_each_stage_is_judged_on_its_own_requests() -> None:
    config = resolve(
        shape="steps",
        shape_steps=(1.0, 4.0),
        shape_step_s=4.0,
        load_warmup=1000.0,
        perf_latency_p99=50.0,
    )
    log = WindowLog()
    start = 1000.0
    for i in range(400):  # 4 s at 100 req/s, 20 ms; then 4 s at 100 req/s, 80 ms
        log.record(start + i / 100, "m", 20.0, True, 1)
        log.record(start + 4 + i / 100, "m", 80.0, True, 1)
    results = judge_stages(log, stages_of(config), start, start + 8, config)
    assert [r.passed for r in results] == [True, False]
    assert [r.figures.requests for r in results] == [300, 300]  # after 1 s of settling
    assert results[1].figures.p99_ms == pytest.approx(80, rel=1e-3)  # the histogram's 0.1%
    assert math.isnan(results[1].figures.goodput)
    table = stages_table(results)
    assert "FAIL - perf_latency_p99 (ms) measured 80.06, target <= 50" in table


# -- real runs ------------------------------------------------------------------------------
def shaped_run(endpoints: Endpoints, tmp_path: Path, *args: str) -> dict:
    done = run_locust(
        RATE_LOCUSTFILE,
        "OpenUser",
        "--headless",
        "--host",
        f"http://{endpoints.http}",
        "--triton-model",
        "sleepy",
        "--triton-load-warmup",
        "1000",
        *args,
        tmp_path=tmp_path,
        timeout=120,
    )
    assert done.report is not None, done.tail()
    return {**done.report, "code": done.code, "output": done.output}


@pytest.mark.load
@pytest.mark.triton
def test_steps_of_users_are_judged_per_stage(sleepy_server: Endpoints, tmp_path: Path) -> None:
    """1 user, then 10: the model serves one request at a time, so the second stage's
    requests queue (~220 ms) and fail the 120 ms p99 target the first stage meets (~25 ms).
    (A stage's p99 is its slowest few requests: with 5 users and 70 ms, one request of the
    first stage delayed by the CPU beside the run failed it in a full run.)"""
    run = shaped_run(
        sleepy_server,
        tmp_path,
        "--triton-shape",
        "steps",
        "--triton-shape-steps",
        "1,10",
        "--triton-shape-step-s",
        "4",
        "--perf-latency-p99",
        "120",
    )
    assert run["code"] == 1, run["output"][-3000:]
    first, second = run["stages"]
    assert first["passed"] and not second["passed"], run["stages"]
    assert first["p99_ms"] < 120 < second["p99_ms"]
    assert first["label"] == "1 users" and second["label"] == "10 users"
    verdict = run["output"][run["output"].index("Stages (steps):") :]
    assert "stage 2 (10 users) p99 (ms) perf_latency_p99 (ms) measured" in verdict, verdict
    assert run["stability"] is None  # a shaped run's load changes by design


@pytest.mark.load
@pytest.mark.triton
def test_a_spike_is_judged_per_stage(sleepy_server: Endpoints, tmp_path: Path) -> None:
    """1 user, 10, then 1 again: only the spike's requests queue (~220 ms) past the 120 ms
    target. (With 5 users and 70 ms, one request of the first stage delayed by the CPU beside
    the run failed it in a full run, at 3 workers.)"""
    run = shaped_run(
        sleepy_server,
        tmp_path,
        "--triton-shape",
        "spike",
        "--triton-shape-steps",
        "1,10",
        "--triton-shape-step-s",
        "3",
        "--perf-latency-p99",
        "120",
    )
    assert run["code"] == 1, run["output"][-3000:]
    stages = run["stages"]
    assert [s["label"] for s in stages] == ["1 users", "10 users", "1 users"], stages
    assert [s["passed"] for s in stages] == [True, False, True], stages
    assert stages[1]["p99_ms"] > 120 > max(stages[0]["p99_ms"], stages[2]["p99_ms"])
    assert "Stages (spike):" in run["output"]


@pytest.mark.load
@pytest.mark.triton
def test_a_ramp_rises_then_holds(sleepy_server: Endpoints, tmp_path: Path) -> None:
    """1 user rising to 5 over 3 s, then 5 held: the held stage waits longer than the ramp,
    whose first requests met no queue."""
    run = shaped_run(
        sleepy_server,
        tmp_path,
        "--triton-shape",
        "ramp",
        "--triton-shape-steps",
        "1,5",
        "--triton-shape-step-s",
        "3",
    )
    assert run["code"] == 0, run["output"][-3000:]
    ramp, held = run["stages"]
    assert (ramp["label"], held["label"]) == ("1 -> 5 users", "5 users"), run["stages"]
    assert ramp["requests"] > 0 and held["requests"] > 0
    assert ramp["p50_ms"] < held["p50_ms"], run["stages"]
    assert "Stages (ramp):" in run["output"]


@pytest.mark.load
@pytest.mark.triton
def test_an_open_loop_shape_moves_the_rate(sleepy_server: Endpoints, tmp_path: Path) -> None:
    run = shaped_run(
        sleepy_server,
        tmp_path,
        "-u",
        "2",
        "--triton-request-rate",
        "1",  # open loop: the stages' loads are the rates
        "--triton-shape",
        "steps",
        "--triton-shape-steps",
        "10,30",
        "--triton-shape-step-s",
        "4",
    )
    assert run["code"] == 0, run["output"][-3000:]
    rates = [s["request_rate"] for s in run["stages"]]
    assert rates == [pytest.approx(10, rel=0.25), pytest.approx(30, rel=0.25)], run["stages"]
    assert [s["label"] for s in run["stages"]] == ["10 req/s", "30 req/s"]


@pytest.mark.load
@pytest.mark.triton
def test_a_recorded_trace_is_replayed(sleepy_server: Endpoints, tmp_path: Path) -> None:
    """3 s at 10 req/s of batch 1, then 3 s at 20 req/s of batch 2, replayed open loop."""
    trace = tmp_path / "trace.csv"
    rows = [f"{i / 10:.2f},1" for i in range(30)] + [f"{3 + i / 20:.3f},2" for i in range(60)]
    trace.write_text("arrival_s,batch_size\n" + "\n".join(rows) + "\n")
    run = shaped_run(
        sleepy_server,
        tmp_path,
        "-u",
        "2",
        "--triton-shape",
        "replay",
        "--triton-replay",
        str(trace),
        "--triton-shape-step-s",
        "3",
    )
    assert run["code"] == 0, run["output"][-3000:]
    first, second = run["stages"]
    assert (first["load"], second["load"]) == (10, 20)
    assert first["request_rate"] == pytest.approx(10, rel=0.25), run["stages"]
    assert second["request_rate"] == pytest.approx(20, rel=0.25), run["stages"]
    assert second["throughput"] == pytest.approx(2 * second["request_rate"])  # batch 2
    assert run["measured"]["requests"] == pytest.approx(90, abs=3)
