"""Whether a run of fixed length (Locust's -t) holds the measurement it is judged on: the
warm-up, then --triton-stability-windows windows that agree.

perf_analyzer measures until its windows agree; a Locust run stops at -t, so its windows must
fit in it. Where --triton-measurement-interval was not set, the windows are fitted to the run:
shortened from the default so that SPARE_WINDOWS more than the needed ones fit (a window
disturbed by something beside the run leaves others to agree), never below MIN_WINDOW_MS.
Where they cannot fit and a latency or throughput target would fail the run on it, the run is
refused before any load, naming the shortest -t that works. Pure: settings in, settings out.
"""

from __future__ import annotations

import dataclasses
import math

from pytest_triton.base.config import BY_NAME, TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.load.measure.run_verdict import gates_on_speed
from pytest_triton.load.measure.window_log import SLICE_S

MIN_WINDOW_MS = 1000.0
"""The shortest window a run is fitted with (a window of a few hundred requests at least)."""
SPARE_WINDOWS = 2
MARGIN_S = 1.0
"""Run time that holds no window: the first request's start, and the slices the warm-up's end
and the run's end cut (window_log.py measures whole 250 ms slices only)."""
FITTED = "fitted to -t"
"""The origin of a window length fitted to the run (TritonConfig.origins): `fitted to -t 15s`."""


def fit_to_run(config: TritonConfig, run_time_s: float | None) -> TritonConfig:
    """The config with its windows fitted to a run of `run_time_s` (None: unbounded, as is a
    shaped run's or one measured by request count: unchanged); ConfigError when they cannot fit
    and a speed target is judged on them."""
    m = config.measurement
    if not run_time_s or config.load.shape != "none" or m.measurement_mode != "time_windows":
        return config
    given = not (fitted(config) or config.origins.get("measurement_interval") == "default")
    room_s = run_time_s - m.load_warmup / 1e3 - MARGIN_S
    needed = m.stability_windows
    if given:
        interval_ms = m.measurement_interval
        fits = room_s * 1e3 >= needed * interval_ms - 1e-6
    else:
        default_ms = BY_NAME["measurement_interval"].default
        spread_ms = _whole_slices(room_s * 1e3 / (needed + SPARE_WINDOWS))
        interval_ms = max(MIN_WINDOW_MS, min(default_ms, spread_ms))
        fits = room_s * 1e3 >= needed * MIN_WINDOW_MS - 1e-6
    if not fits and gates_on_speed(config) and not m.allow_unstable:
        raise ConfigError(too_short(config, run_time_s, given))
    if interval_ms == m.measurement_interval:
        return config
    return dataclasses.replace(
        config,
        measurement=dataclasses.replace(m, measurement_interval=interval_ms),
        origins={**config.origins, "measurement_interval": f"{FITTED} {run_time_s:g}s"},
    )


def fitted(config: TritonConfig) -> bool:
    return config.origins.get("measurement_interval", "").startswith(FITTED)


def window_text(config: TritonConfig) -> str:
    """The windows' length, and whether it was fitted to the run: `2.5 s each, fitted to
    -t 15s`."""
    text = f"{config.measurement.measurement_interval / 1e3:g} s each"
    return f"{text}, {config.origins['measurement_interval']}" if fitted(config) else text


def shortest_run_s(config: TritonConfig, given: bool) -> int:
    """The shortest -t, in whole seconds, that holds the warm-up and the needed windows."""
    m = config.measurement
    window_ms = m.measurement_interval if given else MIN_WINDOW_MS
    return math.ceil(m.load_warmup / 1e3 + m.stability_windows * window_ms / 1e3 + MARGIN_S)


def too_short(config: TritonConfig, run_time_s: float, given: bool) -> str:
    m = config.measurement
    shortest = shortest_run_s(config, given)
    windows = (
        f"{m.stability_windows} windows of --triton-measurement-interval "
        f"{m.measurement_interval:g} ms"
        if given
        else f"{m.stability_windows} windows of at least {MIN_WINDOW_MS:g} ms "
        "(--triton-measurement-interval, fitted to -t when not set)"
    )
    return (
        f"-t {run_time_s:g}s is too short for the measurement a latency or throughput target "
        f"is judged on: after the warm-up (--triton-load-warmup {m.load_warmup:g} ms) "
        f"{windows} must agree, with {MARGIN_S:g} s to spare: give -t {shortest}s or more, "
        "or shorten --triton-load-warmup or --triton-measurement-interval (a bare number is "
        "in ms; or give a unit: 500ms, 2s)"
        + ("" if not given else ", or leave --triton-measurement-interval unset to fit the run")
    )


def _whole_slices(ms: float) -> float:
    """`ms` rounded down to whole slices of the window log (a window is cut on them)."""
    slice_ms = SLICE_S * 1e3
    return math.floor(ms / slice_ms + 1e-9) * slice_ms
