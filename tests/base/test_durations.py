"""Duration settings say their unit everywhere and take a unit where a user writes one: a bare
number keeps the setting's unit (ms or s), `5s` / `500ms` / `2m` are converted, through the one
settings table, so the command lines, TRITON_* variables, ini keys and the docs agree."""

from __future__ import annotations

import argparse

import pytest

from pytest_triton.base.config import BY_NAME, SETTINGS
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_parsers import Duration
from pytest_triton.base.setting_sources import (
    add_arguments,
    from_arguments,
    from_environ,
    from_mapping,
)


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("5000", "ms", 5000.0),  # a bare number keeps today's unit
        ("5s", "ms", 5000.0),
        (" 4 s ", "ms", 4000.0),
        ("500ms", "ms", 500.0),
        ("0.3s", "ms", 300.0),  # decimal: exactly 300, not 300.00000000000006
        ("1.1s", "ms", 1100.0),
        ("250us", "ms", 0.25),
        ("1e3", "ms", 1000.0),
        ("90", "s", 90.0),
        ("1500ms", "s", 1.5),
        ("2m", "s", 120.0),
        ("1h", "s", 3600.0),
    ],
)
def test_a_duration_reads_its_unit_or_the_settings(text: str, unit: str, expected: float) -> None:
    assert Duration(unit)(text) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["0", "-1", "fast", "5 sec", "5 parsecs", "", "inf", "1e999"])
def test_a_bad_duration_says_the_unit_and_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        Duration("ms")(text)
    assert str(refused.value) == (
        f"expected a number > 0, got {text!r} (a duration: a bare number is in ms, or give its "
        "unit: 500ms, 5s)"
    )


def test_zero_is_a_duration_only_where_the_setting_allows_it() -> None:
    assert Duration("ms", zero=True)("0") == 0.0  # no warm-up
    assert resolve(from_mapping({"load_warmup": "0s"}, "ini")).measurement.load_warmup == 0.0
    with pytest.raises(ConfigError, match=r"measurement_interval=: expected a number > 0"):
        resolve(from_mapping({"measurement_interval": "0ms"}, "ini"))


DURATIONS = [s for s in SETTINGS if s.duration is not None]


def test_every_duration_setting_is_one() -> None:
    """A setting whose value is a time (by its name, metavar or help) parses as a duration,
    so no duration setting is left bare-number-only and unitless."""
    looks_like_time = {
        s.name
        for s in SETTINGS
        if s.metavar in ("MS", "SECONDS")
        or s.name.endswith(("_ms", "_s", "_timeout", "_interval", "_warmup", "_at", "_then"))
        or (s.bound == "max" and s.unit == "ms")
    }
    not_times = {
        "warmup": "a count of Triton model_warmup runs",
        "fixed_warmup": "a switch",
        "perf_output_tokens_per_s": "a rate",
    }
    assert {s.name for s in DURATIONS} == looks_like_time - set(not_times)
    assert all(BY_NAME[name].duration is None for name in not_times)


@pytest.mark.parametrize("setting", DURATIONS, ids=lambda s: s.name)
def test_help_and_default_say_the_unit(setting: object) -> None:
    s = BY_NAME[setting.name]  # type: ignore[attr-defined]
    unit = s.unit
    assert unit in ("ms", "s")
    assert f"(in {unit}, or with a unit: " in s.describe()
    if isinstance(s.default, float) and s.shown_default is None:
        assert f"(default: {s.default:g} {unit})" in s.describe()


def test_cli_env_and_ini_take_the_same_units() -> None:
    """One table, every source: the Locust flag, the TRITON_* variable, the ini key."""
    parser = argparse.ArgumentParser()
    add_arguments(parser, "perf")
    args = parser.parse_args(["--triton-measurement-interval", "4s", "--perf-latency-p99", "50"])
    cli = resolve(from_arguments(args, "perf"))
    env = resolve(
        from_environ(
            {"TRITON_MEASUREMENT_INTERVAL": "4000", "TRITON_PERF_LATENCY_P99": "0.05s"}, "perf"
        )
    )
    ini = resolve(from_mapping({"measurement_interval": "4s", "perf_latency_p99": "50ms"}, "ini"))
    for config in (cli, env, ini):
        assert config.measurement.measurement_interval == 4000.0
        assert config.gate.perf_latency_p99 == 50.0
    seconds = resolve(from_mapping({"request_timeout": "1500ms", "startup_timeout": "2m"}, "ini"))
    assert (seconds.client.request_timeout, seconds.server.startup_timeout) == (1.5, 120.0)


def test_a_bad_duration_names_where_it_came_from() -> None:
    with pytest.raises(
        ConfigError,
        match=r"TRITON_LOAD_WARMUP: expected a number >= 0, got '1 sec' \(a duration: a bare "
        r"number is in ms, or give its unit: 500ms, 5s\)",
    ):
        resolve(from_environ({"TRITON_LOAD_WARMUP": "1 sec"}, "perf"))
