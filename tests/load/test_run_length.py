"""A run of fixed length (-t) holds the measurement its targets are judged on: windows left
at their default are fitted to the run, and a run whose explicit settings cannot hold it is
refused before any load, saying the shortest -t that works. The arithmetic, without a server
(tests/docs/test_load_page.py runs the docs' 15-second example for real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_sources import from_mapping
from pytest_triton.load.measure.run_length import (
    MARGIN_S,
    MIN_WINDOW_MS,
    fit_to_run,
    fitted,
    window_text,
)
from tests.helpers.locust_runs import PROBE_LOCUSTFILE, run_locust, subprocess_env

P99 = {"perf_latency_p99": 50}


def config(**values: object) -> TritonConfig:
    return resolve(from_mapping(values, "--triton-x"))


def interval(cfg: TritonConfig) -> float:
    return cfg.measurement.measurement_interval


def test_the_docs_first_run_gets_windows_that_fit() -> None:
    """-t 15s with the default 1 s warm-up: 13 s of room hold 5 windows of 2.5 s (3 must
    agree, 2 to spare), where 5 s windows held only 2 and failed as "not stable"."""
    fit = fit_to_run(config(**P99), 15)
    assert interval(fit) == 2500.0 and fitted(fit)
    assert fit.origins["measurement_interval"] == "fitted to -t 15s"
    assert window_text(fit) == "2.5 s each, fitted to -t 15s"
    assert 5 * interval(fit) / 1e3 <= 15 - 1 - MARGIN_S


@pytest.mark.parametrize(("run_time", "window_ms"), [(30, 5000), (27, 5000), (20, 3500), (8, 1000)])
def test_default_windows_shorten_only_as_far_as_the_run_needs(
    run_time: int, window_ms: float
) -> None:
    fit = fit_to_run(config(**P99), run_time)
    assert interval(fit) == window_ms
    assert fitted(fit) is (window_ms != 5000)
    room_ms = (run_time - 1 - MARGIN_S) * 1e3
    assert 3 * interval(fit) <= room_ms and interval(fit) % 250 == 0  # whole 250 ms slices


def test_fitting_again_follows_the_new_run_time() -> None:
    """A web UI run after another, with another -t: a fitted length is not the user's own."""
    first = fit_to_run(config(**P99), 15)
    assert interval(fit_to_run(first, 15)) == 2500.0
    again = fit_to_run(first, 20)
    assert interval(again) == 3500.0 and again.origins["measurement_interval"].endswith("20s")


def test_explicit_windows_that_fit_are_kept() -> None:
    cfg = config(measurement_interval="4s", **P99)
    assert fit_to_run(cfg, 15) is cfg  # 1 s + 3 x 4 s + 1 s = 14 s


def test_explicit_windows_that_cannot_fit_are_refused_naming_what_to_change() -> None:
    with pytest.raises(ConfigError) as refused:
        fit_to_run(config(measurement_interval="5000", **P99), 15)
    message = str(refused.value)
    assert message.startswith("-t 15s is too short for the measurement")
    for named in (
        "--triton-load-warmup 1000 ms",
        "3 windows of --triton-measurement-interval 5000 ms",
        "give -t 17s or more",
        "a bare number is in ms; or give a unit: 500ms, 2s",
        "leave --triton-measurement-interval unset to fit the run",
    ):
        assert named in message, message
    assert fit_to_run(config(measurement_interval="5000", **P99), 17) is not None


def test_a_run_too_short_even_for_fitted_windows_is_refused() -> None:
    cfg = config(load_warmup="2s", **P99)
    with pytest.raises(ConfigError) as refused:
        fit_to_run(cfg, 5)
    message = str(refused.value)
    assert "3 windows of at least 1000 ms (--triton-measurement-interval" in message
    assert "--triton-load-warmup 2000 ms" in message and "give -t 6s or more" in message
    fit = fit_to_run(cfg, 6)  # the shortest -t it named holds the windows
    assert interval(fit) == MIN_WINDOW_MS


@pytest.mark.parametrize(
    "values",
    [
        {},  # no speed target: instability is a warning, the run goes on
        {"allow_unstable": True, **P99},
    ],
    ids=["no-target", "allow-unstable"],
)
def test_nothing_refused_where_instability_cannot_fail_the_run(values: dict) -> None:
    assert interval(fit_to_run(config(**values), 3)) == MIN_WINDOW_MS
    explicit = config(measurement_interval=5000, **values)
    assert fit_to_run(explicit, 3) is explicit


@pytest.mark.parametrize(
    ("values", "run_time"),
    [
        ({"shape": "steps", **P99}, 4),  # each stage is judged instead
        ({"measurement_mode": "count_windows", **P99}, 4),  # windows of requests, not time
        (P99, None),  # no -t: the web UI's run without an end
    ],
)
def test_runs_without_time_windows_to_fit_are_left_alone(
    values: dict, run_time: float | None
) -> None:
    cfg = config(**values)
    assert fit_to_run(cfg, run_time) is cfg


@pytest.mark.load
def test_locust_refuses_a_run_too_short_before_any_load(tmp_path: Path) -> None:
    """From Locust: the refusal comes before the embedded server exists (nothing exported,
    nothing started), exit code 2, in one line naming the flags, their units and the -t that
    works."""
    env = subprocess_env()
    del env["TRITON_ALLOW_UNSTABLE"]  # a user's run: instability would fail the target
    done = run_locust(
        PROBE_LOCUSTFILE,
        *("--headless", "-u", "1", "-r", "1", "-t", "10s"),
        *("--triton-measurement-interval", "4s", "--perf-latency-p99", "50"),
        tmp_path=tmp_path,
        timeout=60,
        env=env,
    )
    assert done.code == 2, done.tail()
    assert "embedded tritonserver" not in done.output and "exported" not in done.output
    assert (
        "pytest-triton: -t 10s is too short for the measurement a latency or throughput target "
        "is judged on: after the warm-up (--triton-load-warmup 1000 ms) 3 windows of "
        "--triton-measurement-interval 4000 ms must agree, with 1 s to spare: give -t 14s or "
        "more"
    ) in done.output, done.tail()
