"""Requests entered in bulk give Locust's statistics and the window log exactly what one
request event each gives (bulk_requests.py); another listener still gets every request."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from locust.env import Environment
from locust.event import Events

from pytest_triton.load.runner import bulk_requests as bulk
from pytest_triton.load.runner.recording import attach_window_log

T0 = 1_000_000.9  # a tenth of a second before a whole second: the run crosses seconds
CONTEXT = {"batch_size": 4, "protocol": "http"}


def environment() -> Environment:
    env = Environment(user_classes=[], events=Events())
    env.create_local_runner()
    attach_window_log(env)
    return env


def requests(count: int = 3_000) -> list[tuple[float, float, int]]:
    """(completion time, latency ms, bytes): 2.4 s of answers, latencies of a long tail."""
    generator = np.random.default_rng(7)
    times = T0 + np.sort(generator.uniform(0, 2.4, count))
    latencies = generator.lognormal(0.5, 0.8, count)
    sizes = generator.integers(30, 90, count)
    return [(float(t), float(ms), int(n)) for t, ms, n in zip(times, latencies, sizes, strict=True)]


def feed(env: Environment, monkeypatch: pytest.MonkeyPatch, one_by_one: bool) -> None:
    now = [T0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    log = bulk.window_log(env)
    assert log is not None
    log.clock = lambda: now[0]
    entry = bulk.bulk_requests(env)
    assert entry is not None, "only Locust's statistics and the window log listen"
    for at, latency, size in requests():
        now[0] = at
        if one_by_one:
            env.events.request.fire(
                request_type="HTTP",
                name="m",
                response_time=latency,
                response_length=size,
                exception=None,
                context=CONTEXT,
            )
        else:
            entry.add("HTTP", "m", CONTEXT, latency, size)
    entry.flush()
    monkeypatch.undo()


def figures(env: Environment) -> dict[str, Any]:
    assert env.runner is not None
    stats = env.runner.stats
    log = bulk.window_log(env)
    assert log is not None
    found: dict[str, Any] = {}
    for label, entry in (("total", stats.total), ("named", stats.get("m", "HTTP"))):
        found[label] = (
            entry.num_requests,
            dict(entry.num_reqs_per_sec),
            round(entry.total_response_time, 6),
            entry.min_response_time,
            entry.max_response_time,
            dict(entry.response_times),
            entry.total_content_length,
            entry.last_request_timestamp,
            {
                k: (v.num_requests, dict(v.response_times))
                for k, v in entry.response_times_cache.items()
            },
        )
    for key, by_name in log.slices.items():
        s = by_name["m"]
        found[f"slice {key}"] = (
            s.requests,
            s.failures,
            s.samples,
            round(s.latency_sum_ms, 6),
            s.histogram.count,
            [s.histogram.percentile_ms(p) for p in (50, 90, 99, 100)],
        )
    return found


def test_bulk_entry_gives_what_one_event_per_request_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    by_event, in_bulk = environment(), environment()
    feed(by_event, monkeypatch, one_by_one=True)
    feed(in_bulk, monkeypatch, one_by_one=False)
    expected = figures(by_event)
    assert len([k for k in expected if k.startswith("slice")]) >= 9  # slices and seconds crossed
    assert len(expected["total"][1]) == 4  # seconds crossed
    assert figures(in_bulk) == expected


def test_another_listener_gets_every_request_as_an_event(monkeypatch: pytest.MonkeyPatch) -> None:
    env = environment()
    entry = bulk.bulk_requests(env)
    assert entry is not None
    entry.add("HTTP", "m", CONTEXT, 1.0, 10)  # the first is entered at once
    entry.add("HTTP", "m", CONTEXT, 1.5, 10)  # kept
    heard: list[tuple[str, float, dict[str, Any]]] = []
    env.events.request.add_listener(
        lambda name, response_time, context, **_: heard.append((name, response_time, context))
    )
    assert bulk.bulk_requests(env) is None, "a new user fires its events one by one"
    entry.add("HTTP", "m", CONTEXT, 2.5, 10)
    entry.flush()
    assert heard == [("m", 1.5, CONTEXT), ("m", 2.5, CONTEXT)]
    assert env.runner is not None and env.runner.stats.total.num_requests == 3


def test_requests_kept_across_a_statistics_reset_belong_to_before_it() -> None:
    env = environment()
    entry = bulk.bulk_requests(env)
    assert entry is not None
    entry.add("HTTP", "m", CONTEXT, 1.0, 10)  # the first is entered at once
    entry.add("HTTP", "m", CONTEXT, 1.5, 10)
    assert env.runner is not None
    env.runner.stats.reset_all()  # as Locust resets: its statistics, then the event
    env.events.reset_stats.fire()
    entry.flush()
    assert env.runner.stats.total.num_requests == 0
    entry.add("HTTP", "m", CONTEXT, 2.0, 10)
    entry.flush()
    assert env.runner.stats.total.num_requests == 1
