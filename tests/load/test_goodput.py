"""Goodput: the share of requests answered successfully within a latency SLO, as a Locust
target (--perf-goodput, --perf-slo-ms) and as what triton-perf's latency-bounded search holds
(--goodput). The figure's arithmetic on made-up logs, then real runs on a model of known
speed (20 ms a request, one instance)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from pytest_triton.base.config_resolution import check_goodput, resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.urls import Endpoints
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.goodput import goodput_between, share_within
from pytest_triton.load.measure.latency_histogram import LatencyHistogram
from pytest_triton.load.measure.window_log import WindowLog
from pytest_triton.load.measure.windows import merge
from pytest_triton.load.perf.points import Point, bound_summary, largest_within_bound
from tests.helpers.locust_runs import REPO, Locust, run_locust, triton_perf_args

RATE_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "rate.py"


def test_share_within_counts_latencies_at_or_below_the_slo() -> None:
    histogram = LatencyHistogram.of([5.0] * 90 + [20.0] * 9 + [300.0])
    assert share_within(histogram, 20) == pytest.approx(0.99)
    assert share_within(histogram, 19.9) == pytest.approx(0.90)
    assert share_within(histogram, 1000) == 1.0
    assert math.isnan(share_within(LatencyHistogram(), 20))


def test_a_failed_request_is_never_good() -> None:
    log = WindowLog()
    for i in range(100):
        log.record(1000.1 + i / 100, "m", 5.0, ok=i >= 10, samples=1)  # 10 fast failures
    assert goodput_between(log, 1000.0, 1002.0, 20) == pytest.approx(0.9)
    assert goodput_between(log, 1000.0, 1002.0, 1) == 0.0
    assert math.isnan(goodput_between(log, 2000.0, 2001.0, 20))  # no request there


def test_goodput_is_a_min_target_judged_on_the_whole_run() -> None:
    whole = tg.Measured(100, 0, 100, 1.0, 5.0, 6.0, 7.0, goodput=0.95)
    windows = dataclasses.replace(whole, goodput=1.0)  # what the stable windows saw
    (check,) = [
        c
        for c in tg.evaluate(tg.Targets(perf_goodput=0.99), windows, whole)
        if c.name == "perf_goodput"
    ]
    assert check.passed is False and check.measured == 0.95 and check.kind == "min"
    # without a limit and without an SLO the row is left out; with an SLO it is reported
    no_slo = dataclasses.replace(whole, goodput=math.nan)
    names = [c.name for c in tg.evaluate(tg.Targets(), no_slo)]
    assert "perf_goodput" not in names
    assert "perf_goodput" in [c.name for c in tg.evaluate(tg.Targets(), whole)]


def test_a_goodput_target_needs_an_slo() -> None:
    with pytest.raises(ConfigError, match="--perf-slo-ms"):
        check_goodput(resolve(perf_goodput=0.99))
    assert check_goodput(resolve(perf_goodput=0.99), slo_ms=50) == 50  # triton-perf's bound
    assert check_goodput(resolve(perf_goodput=0.99, perf_slo_ms=20), slo_ms=50) == 20


def test_the_bound_search_holds_goodput_instead_of_the_percentile() -> None:
    def point(c: int, p99: float, goodput: float) -> Point:
        return Point(1, c, 1.0, 100, 0, p99, p99, p99, p99, p99, goodput=goodput)

    points = [point(1, 80, 0.999), point(2, 120, 0.995), point(4, 300, 0.9)]
    assert largest_within_bound(points, 50).__class__ is type(None)  # p99 never within
    best = largest_within_bound(points, 50, goodput=0.99)
    assert best is not None and best.concurrency == 2
    summary = bound_summary(best, 50, 99, "rec/s", goodput=0.99)
    assert summary.startswith("goodput 0.99 within 50 ms: up to 2 concurrent requests")


# -- real runs ------------------------------------------------------------------------------
@pytest.mark.load
@pytest.mark.triton
def test_a_locust_run_fails_when_too_few_requests_meet_the_slo(
    sleepy_server: Endpoints, tmp_path: Path
) -> None:
    """One user on a 20 ms model: every request takes 20-30 ms. Within 200 ms the goodput is
    1 and the run passes; within 10 ms it is 0 and the run fails naming perf_goodput."""

    def run(slo_ms: str) -> dict:
        done = run_locust(
            RATE_LOCUSTFILE,
            "OpenUser",
            "--headless",
            "-u",
            "1",
            "-r",
            "1",
            "-t",
            "5s",
            "--host",
            f"http://{sleepy_server.http}",
            "--triton-model",
            "sleepy",
            "--perf-goodput",
            "0.95",
            "--perf-slo-ms",
            slo_ms,
            tmp_path=tmp_path,
        )
        assert done.report is not None, done.tail()
        return {**done.report, "code": done.code, "output": done.output}

    loose, tight = run("200"), run("10")
    for r in (loose, tight):
        (check,) = [c for c in r["checks"] if c["name"] == "perf_goodput"]
        r["check"] = check
    assert loose["code"] == 0 and loose["check"]["measured"] > 0.95, loose["output"][-3000:]
    assert tight["code"] == 1 and tight["check"]["measured"] < 0.2, tight["output"][-3000:]
    assert "RESULT: FAIL - perf_goodput measured" in tight["output"]
    assert tight["measured"]["slo_ms"] == 10


SLO_MS = 250


@pytest.mark.load
@pytest.mark.triton
def test_triton_perf_reports_the_highest_rate_at_which_goodput_holds(
    sleepy_server: Endpoints, tmp_path: Path
) -> None:
    """At 15 req/s the 20 ms model answers in ~25 ms; at 70 req/s (beyond its ~45 req/s) the
    queue grows without end: with --goodput 0.9 and a 250 ms SLO the answer is 15 req/s.

    The SLO lies between the two points' latencies with room on both sides: the overloaded
    point's first window already answers in 200-760 ms, while a burst of CPU beside the run
    (the suite's other workers) delays the python backend's 20 ms answers to 100-180 ms for
    seconds: a full suite once measured a goodput of 0.84 within 60 ms at 15 req/s."""
    out = tmp_path / "perf.json"
    run = Locust(
        [
            *triton_perf_args("tests.helpers.probe_models:probe_spec"),
            "--url",
            f"http://{sleepy_server.http}",
            "--model-name",
            "sleepy",
            "--request-rate-range",
            "15,70",
            "--triton-measurement-interval",
            "1000",
            "--triton-load-warmup",
            "500",
            "--triton-stability-percentage",
            "50",
            # 15 requests a 1 s window: one slow answer on a loaded machine is a window's
            # p99; CI once saw 87 and 75 ms, then 29 and 29, and 4 trials ended unstable
            "--max-trials",
            "8",
            "--latency-bound",
            str(SLO_MS),
            "--goodput",
            "0.9",
            "--json",
            str(out),
            "--no-progress",
        ]
    )
    done = run.finish(180)
    assert done.code == 0, done.tail()
    report = json.loads(out.read_text())
    points = {p["request_rate_asked"]: p for p in report["points"]}
    assert points[15]["goodput"] >= 0.9 and points[70]["goodput"] < 0.5, points
    assert report["goodput"] == 0.9 and report["slo_ms"] == SLO_MS
    assert report["within_bound"]["1"]["request_rate_asked"] == 15
    assert f"goodput 0.9 within {SLO_MS} ms: up to an open-loop rate of 15 req/s" in done.stdout


def test_windows_where_every_request_failed_report_no_latency() -> None:
    """A failure's latency is no answer's: a window of failures only has no percentiles, one
    with some answers keeps them."""
    log = WindowLog()
    for i in range(100):
        log.record(1000.1 + i / 200, "m", 5.0, ok=False, samples=1)  # first second: failures
        log.record(1001.1 + i / 200, "m", 5.0, ok=i % 2 == 0, samples=1)  # then half answered
    failed, mixed = log.windows(1000.0, 1002.0, warmup_s=0, interval_s=1.0)
    assert failed.requests == failed.failures == 100
    assert math.isnan(failed.p99_ms) and math.isnan(failed.avg_ms), failed
    assert mixed.failures == 50 and mixed.p99_ms == pytest.approx(5.0, rel=1e-2)
    assert math.isnan(merge([failed]).p99_ms) and math.isnan(merge([failed]).avg_ms)
    both = merge([failed, mixed])
    assert both.requests == 200 and both.avg_ms == pytest.approx(5.0, rel=1e-2)
