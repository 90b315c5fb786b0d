"""Measurements a release can trust, proven on real servers: an open loop sees the stall a
closed loop hides (coordinated omission), a measurement that never settles is flagged, and the
latency-bounded analysis works in both modes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_triton.base.urls import Endpoints
from pytest_triton.load.measure.windows import Criterion, Window, assess
from pytest_triton.server import LocalLauncher, ServerArgs
from tests.helpers.locust_runs import REPO, Locust, run_locust, subprocess_env, triton_perf_args
from tests.helpers.probe_models import (
    SLOW_S,
    SLOWING_MODEL,
    STALL_MODEL,
    STALL_MS,
    WARMED_FILE,
    WARMING_MODEL,
    write_sleepy,
)

RATE_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "rate.py"

pytestmark = [pytest.mark.load, pytest.mark.triton]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stall, slowing and sleepy (20 ms a request): one python-backend instance each."""
    root = tmp_path_factory.mktemp("repo")
    write_sleepy(root, "stall", source=STALL_MODEL)
    write_sleepy(root, "slowing", source=SLOWING_MODEL)
    # a second one: the first stays slow after its test (it slows from its first request)
    write_sleepy(root, "slowing_too", source=SLOWING_MODEL)
    write_sleepy(root, "slowing_again", source=SLOWING_MODEL)
    write_sleepy(root, "sleepy")
    write_sleepy(root, "warming", source=WARMING_MODEL)
    write_sleepy(root, "warming_too", source=WARMING_MODEL)
    return root


@pytest.fixture(scope="module")
def models(repository: Path) -> Iterator[Endpoints]:
    with LocalLauncher().start(ServerArgs(repository, model_control_mode="none")) as server:
        yield server.endpoints


def rate_run(
    endpoints: Endpoints,
    model: str,
    user: str,
    *args: str,
    tmp_path: Path,
    seconds: int = 8,
    **env: str,
) -> dict:
    run = run_locust(
        RATE_LOCUSTFILE,
        user,
        "--headless",
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        f"{seconds}s",
        "--host",
        f"http://{endpoints.http}",
        "--triton-model",
        model,
        *args,
        tmp_path=tmp_path,
        env=subprocess_env(**env),
    )
    assert run.report is not None, run.tail()
    return {**run.report, "code": run.code, "output": run.output}


def late_share(measured: dict) -> float:
    """The share of requests slower than the run's --perf-slo-ms (its goodput is the share
    within it)."""
    return 1 - measured["goodput"]


def test_an_open_loop_sees_the_stall_a_closed_loop_hides(models: Endpoints, tmp_path: Path) -> None:
    """One request in 200 stalls 200 ms. At 100 req/s a paced closed loop delays only that
    request (0.5% of them) and skips the ~20 sends due meanwhile; the open loop sends them on
    schedule and counts each from its due time, so each stall makes about six requests 150 ms
    late (200, 190, ... 150 ms) and ~10% of requests wait behind the stalls: p99 shows it.
    Judged by the difference of the two loops' late shares (theory: 3% against 0.5%): a
    loaded machine slows both loops' ordinary requests alike, so it cancels out there, where
    it once lifted the closed loop's p99 to 112 ms and a ratio of the two p99s failed."""
    slo = ("--perf-slo-ms", str(STALL_MS * 3 // 4))
    closed = rate_run(models, "stall", "PacedUser", *slo, tmp_path=tmp_path)
    opened = rate_run(
        models, "stall", "OpenUser", "--triton-request-rate", "100", *slo, tmp_path=tmp_path
    )
    c, o = closed["measured"], opened["measured"]
    print(
        f"closed loop: {c['request_rate']:.1f} req/s, p99 {c['p99_ms']:.1f} ms, "
        f"{100 * late_share(c):.2f}% late; open loop: {o['request_rate']:.1f} req/s, "
        f"p99 {o['p99_ms']:.1f} ms, {100 * late_share(o):.2f}% late"
    )
    for run in (closed, opened):
        assert run["code"] == 0 and run["measured"]["failures"] == 0, run["output"][-3000:]
        assert run["measured"]["request_rate"] == pytest.approx(100, rel=0.25)
    assert o["p99_ms"] >= STALL_MS / 2, opened["output"][-3000:]
    assert late_share(o) - late_share(c) > 0.01, (c, o)
    assert "open loop" in opened["output"] and "100 req/s" in opened["output"]


# The slowing model doubles its time every second, so three consecutive 1-s windows lie ~70%
# apart in theory; in the last windows, which hold 2 to 6 requests, rounding brings that down
# (53.6% and 63.8% measured here, under 50% once in CI). Judged at the default 10%, as
# perf_analyzer's, the margin is five-fold.
UNSETTLED = (
    "--triton-measurement-interval",
    "1000",
    "--triton-load-warmup",
    "500",
)


def unsettled_run(models: Endpoints, model: str, *targets: str, tmp_path: Path) -> dict:
    """A slowing model's 7-s run in 1-s windows, judged for stability (not the suite's
    TRITON_ALLOW_UNSTABLE)."""
    return rate_run(
        models,
        model,
        "OpenUser",
        *UNSETTLED,
        *targets,
        tmp_path=tmp_path,
        seconds=7,
        TRITON_ALLOW_UNSTABLE="false",
    )


def stability_row(run: dict) -> dict:
    """The run's `stable windows (spread)` verdict row."""
    (check,) = [c for c in run["checks"] if c["name"] == "stable windows (spread)"]
    return check


SLOWING_LIMIT_MS = 150
"""A p99 target the slowing model's first window meets (5-40 ms a request) and its last
misses (over 200 ms a request from its sixth second on)."""


def test_a_measurement_that_never_settles_fails_the_target_a_window_misses(
    models: Endpoints, tmp_path: Path
) -> None:
    """The windows never agree and some miss the target: whichever windows were taken would
    decide the verdict, so the run fails on its instability, naming the first window that
    misses."""
    run = unsettled_run(
        models,
        "slowing",
        "--perf-latency-p99",
        str(SLOWING_LIMIT_MS),
        tmp_path=tmp_path,
    )
    stability, windows = run["stability"], run["windows"]
    assert run["code"] == 1, run["output"][-3000:]
    assert stability["stable"] is False and len(windows) >= 4, stability
    assert "no 3 consecutive windows" in stability["reason"]
    assert windows[0]["p99_ms"] < SLOWING_LIMIT_MS < windows[-1]["p99_ms"], windows
    assert "NOT STABLE" in run["output"] and "Measurement windows" in run["output"]
    check = stability_row(run)
    assert check["passed"] is False
    first_miss = next(w for w in windows if w["p99_ms"] > SLOWING_LIMIT_MS)
    assert check["note"].startswith(
        f"measurement not stable; window {first_miss['index']}: perf_latency_p99 (ms) measured"
    ), check
    throughputs = [w["throughput"] for w in windows]
    assert throughputs[0] > 2 * throughputs[-1]  # it really slowed down


def test_windows_that_never_agree_but_all_meet_the_targets_pass_with_a_warning(
    models: Endpoints, tmp_path: Path
) -> None:
    """A fixed-length run cannot measure on until its windows agree (a short run on a busy
    machine): where every window meets every target, no choice of windows changes the
    verdict; the targets are judged on all of them, and the report says so."""
    run = unsettled_run(
        models,
        "slowing_again",
        "--perf-latency-p99",
        "100000",  # a target every window meets
        tmp_path=tmp_path,
    )
    stability, windows = run["stability"], run["windows"]
    assert run["code"] == 0, run["output"][-3000:]
    assert stability["stable"] is False and len(windows) >= 4, stability
    check = stability_row(run)
    assert check["passed"] is None and check["note"] == "unstable, every window met the targets"
    (warning,) = [w for w in run["warnings"] if "met every latency and throughput target" in w]
    assert f"judged on all {len(windows)}" in warning, warning
    (p99,) = [c for c in run["checks"] if c["name"] == "perf_latency_p99"]
    assert p99["measured"] <= max(w["p99_ms"] for w in windows), (p99, windows)
    assert f"Measured (all {len(windows)} windows):" in run["output"]


def test_without_a_speed_target_instability_is_a_warning_with_advice(
    models: Endpoints, tmp_path: Path
) -> None:
    """A newcomer's first short run sets no target: it is reported, not failed."""
    run = unsettled_run(models, "slowing_too", tmp_path=tmp_path)
    assert run["code"] == 0, run["output"][-3000:]
    assert run["stability"]["stable"] is False
    check = stability_row(run)
    assert check["passed"] is None and check["note"] == "unstable, allowed"
    assert any("No latency or throughput target is set" in w for w in run["warnings"])
    assert "run longer (-t)" in run["output"]


def test_a_steady_model_gives_a_stable_measurement(models: Endpoints, tmp_path: Path) -> None:
    """The control: 20 ms a request, one user, windows of 1 s (~45 requests each, so a
    window's p99 is its slowest request). One request delayed by a burst of CPU beside the run
    (a CI runner's other worker) puts its window out of agreement; with ~10 windows, some three
    consecutive ones still agree, as they would on a quiet machine. The suite now runs
    bursts of tens of seconds beside it (an AOTInductor compile on both cores, INT8
    calibration): with ~6 windows one such burst failed the control once in two suites."""
    run = rate_run(
        models,
        "sleepy",
        "OpenUser",
        "--triton-measurement-interval",
        "1000",
        "--triton-load-warmup",
        "500",
        "--triton-stability-percentage",
        "50",
        tmp_path=tmp_path,
        seconds=12,
        TRITON_ALLOW_UNSTABLE="false",
    )
    assert run["code"] == 0, run["output"][-3000:]
    assert run["stability"]["stable"] is True, run["stability"]
    measured = run["stability"]["measurement"]
    # 20 ms of sleep caps one user at 50 req/s; a busy machine's backend overhead took a
    # full run down to 34 (43 on a quiet one): a floor of half the cap
    assert 25 <= measured["throughput"] <= 51, measured
    assert measured["p99_ms"] >= 20


BOUND_MS = 250


def test_triton_perf_finds_the_highest_rate_within_a_latency_bound(
    models: Endpoints, tmp_path: Path
) -> None:
    """The sleepy model serves fewer than 50 req/s (20 ms of sleep plus the backend's own
    time: 43 req/s measured here, less on a slower runner): constant arrivals at 15 and 25
    req/s are answered in ~25 ms, at 70 req/s the queue grows without end. (Windows of 1 s
    hold 15 to 25 requests, whose p99 is their slowest: stability is asked within 50% here,
    the subject being the bound. One burst of CPU beside the run doubles one window's p99:
    seen in full runs, "p99 latency 97.1% apart" with 4 trials, "68.2% apart" with 6 on three
    workers. With perf_analyzer's default of 10 trials, three agreeing windows still follow
    two such bursts; a stable point stops at its first three, so only the overloaded point
    pays the 10.) The bound, 250 ms, lies clear of both sides: such a burst lifts the
    answered points' p99 to 100-180 ms (113 ms against a 60 ms limit failed a suite run under
    five parallel jobs), the overloaded point's windows answer in 500 ms and more."""
    out = tmp_path / "perf.json"
    run = Locust(
        [
            *triton_perf_args("tests.helpers.probe_models:probe_spec"),
            "--url",
            f"http://{models.http}",
            "--model-name",
            "sleepy",
            "--request-rate-range",
            "15,25,70",
            "--triton-measurement-interval",
            "1000",
            "--triton-load-warmup",
            "500",
            "--triton-stability-percentage",
            "50",
            "--max-trials",
            "10",
            "--latency-bound",
            str(BOUND_MS),
            "--json",
            str(out),
            "--no-progress",
        ]
    )
    done = run.finish(180)
    assert done.code == 0, done.tail()
    report = json.loads(out.read_text())
    points = {p["request_rate_asked"]: p for p in report["points"]}
    assert set(points) == {15, 25, 70}
    for rate in (15, 25):
        assert points[rate]["stable"], points[rate]["stability"]
        assert points[rate]["p99_ms"] < BOUND_MS, points[rate]
        assert len(points[rate]["windows"]) >= 3
    assert points[70]["p99_ms"] > BOUND_MS
    assert report["within_bound"]["1"]["request_rate_asked"] == 25
    assert "up to an open-loop rate of 25 req/s" in done.stdout
    assert "Windows of batch 1 rate 15 req/s" in done.stdout


SETTLED_PCT = 10.0  # perf_analyzer's stability tolerance, for the unwarm window's throughput


@pytest.mark.parametrize(
    ("model", "fixed", "window_ms"), [("warming", False, 1000), ("warming_too", True, 2000)]
)
def test_the_warmup_lasts_until_the_rate_settles(
    models: Endpoints, repository: Path, tmp_path: Path, model: str, fixed: bool, window_ms: int
) -> None:
    """A first short run of a warming backend (200 ms an execution for its first 7, the
    preflight's and ~1.2 s of the load's, then 20 ms): measured from the end of a fixed 0.5 s
    warm-up, its first window holds the slow second;
    by default the warm-up goes on, in whole seconds, until the rate settles (1.5 s here),
    and every window is measured warm: the model's own clock says when its last slow
    execution ended, before the first window, and no window's p99 reaches a slow
    execution's 200 ms. (Windows of 1 s there, 7 of them: a window's p99 is its slowest
    request, and with only 3 windows of 2 s one request delayed by a CPU burst beside the
    run put the only candidate three out of agreement: a CI failure, "NOT STABLE" with every
    window warm. A p99 bound of 100 ms failed likewise beside the suite: window 5 at
    109.8 ms, the others 24-33 ms, 2.5 s after the last slow execution ended.)"""
    run = rate_run(
        models,
        model,
        "OpenUser",
        "--triton-measurement-interval",
        str(window_ms),
        "--triton-load-warmup",
        "500",
        "--triton-stability-percentage",
        "40",
        *(["--triton-fixed-warmup"] if fixed else []),
        tmp_path=tmp_path,
        seconds=9,
        TRITON_ALLOW_UNSTABLE="false",
    )
    warmup, windows = run["warmup"], run["windows"]
    assert run["code"] == 0, run["output"][-3000:]  # no speed target: a warning at most
    assert f"after a warm-up {warmup['seconds']:.1f}s" in run["output"]
    # when the last slow execution ended, by the model's clock (the wall clock both read)
    warm_after_s = float((repository / model / WARMED_FILE).read_text()) - warmup["begun"]
    p99s = [round(w["p99_ms"], 1) for w in windows]
    if fixed:
        assert warmup == {**warmup, "seconds": 0.5, "settled": None}
        assert warm_after_s > 0.5, warm_after_s  # the slow executions went on past it
        assert windows[0]["p99_ms"] >= 150, p99s  # the slow second, measured
        assert 1 not in run["stability"]["chosen"]
        # ... and its throughput falls short (the slow executions answered fewer): 30-32.5
        # against 47.5-48 a second here (26-31% apart; a sender's stall moved one warm
        # 1-s window 12% in a suite run, so this bound tells little from noise on its own)
        throughputs = [round(w["throughput"], 1) for w in windows]
        assert Criterion().spread_pct(throughputs) > SETTLED_PCT, throughputs
    else:
        assert warmup == {**warmup, "seconds": 1.5, "settled": True}
        assert warm_after_s < 1.5, warm_after_s  # every slow execution before the windows
        assert all(w["p99_ms"] < 1e3 * SLOW_S for w in windows), (p99s, warm_after_s)
        # Stable as the run's own verdict judges, on the windows' median latency (as
        # perf_analyzer judges on the average unless given a percentile): the run's verdict
        # takes their p99, and in 1-s windows of ~40 requests a p99 is the window's slowest
        # request; requests delayed ~75 ms by CPU bursts beside the suite left no 3 windows
        # agreeing there, every window warm (a suite run: NOT STABLE on p99 alone), and a
        # sender stalled by one moved a window's throughput 12% (41 against 47-48 req/s).
        median = assess([Window.from_dict(w) for w in windows], Criterion(3, 40, percentile=50))
        assert median.stable, median.summary()
