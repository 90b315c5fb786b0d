"""Feeds the same requests to Locust's statistics and the window log one request event each
and in bulk (load/runner/bulk_requests.py), in a process of its own (locust's gevent patching
must not reach pytest's), and prints what test_bulk_requests.py checks, as JSON.

    python -m tests.helpers.bulk_probe
"""

from gevent import monkey

monkey.patch_all()

import collections  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import locust.stats  # noqa: E402
import numpy as np  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.event import Events  # noqa: E402

from pytest_triton.load.runner.bulk_requests import (  # noqa: E402
    bulk_requests,
    response_time_buckets,
)
from pytest_triton.load.runner.recording import attach_window_log, window_log  # noqa: E402

T0 = 1_000_000.9  # a tenth of a second before a whole second: the requests cross seconds
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


def feed(env: Environment, one_by_one: bool) -> None:
    """Every request at its own completion time (time.time() and the log's clock)."""
    now = [T0]
    real_time: Callable[[], float] = time.time
    time.time = lambda: now[0]
    log = window_log(env)
    assert log is not None
    log.clock = lambda: now[0]
    entry = bulk_requests(env)
    assert entry is not None, "only Locust's statistics and the window log listen"
    try:
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
    finally:
        time.time = real_time


def figures(env: Environment) -> dict[str, Any]:
    """Every figure Locust's statistics and the window log keep, comparable as JSON."""
    assert env.runner is not None
    stats = env.runner.stats
    log = window_log(env)
    assert log is not None
    found: dict[str, Any] = {}
    for label, entry in (("total", stats.total), ("named", stats.get("m", "HTTP"))):
        found[label] = {
            "requests": entry.num_requests,
            "per second": {str(k): v for k, v in entry.num_reqs_per_sec.items()},
            "latency sum": round(entry.total_response_time, 6),
            "min": entry.min_response_time,
            "max": entry.max_response_time,
            "buckets": {str(k): v for k, v in entry.response_times.items()},
            "bytes": entry.total_content_length,
            "last": entry.last_request_timestamp,
            "cached seconds": {
                str(k): [v.num_requests, {str(b): n for b, n in v.response_times.items()}]
                for k, v in entry.response_times_cache.items()
            },
        }
    for key, by_name in log.slices.items():
        s = by_name["m"]
        found[f"slice {key}"] = [
            s.requests,
            s.failures,
            s.samples,
            round(s.latency_sum_ms, 6),
            s.histogram.count,
            [s.histogram.percentile_ms(p) for p in (50, 90, 99, 100)],
        ]
    return found


def another_listener() -> dict[str, Any]:
    env = environment()
    entry = bulk_requests(env)
    assert entry is not None
    entry.add("HTTP", "m", CONTEXT, 1.0, 10)  # the first is entered at once
    entry.add("HTTP", "m", CONTEXT, 1.5, 10)  # kept
    heard: list[Any] = []
    env.events.request.add_listener(
        lambda name, response_time, context, **_: heard.append([name, response_time, context])
    )
    later = bulk_requests(env)
    entry.add("HTTP", "m", CONTEXT, 2.5, 10)
    entry.flush()
    assert env.runner is not None
    return {
        "bulk for a later user": later is not None,
        "heard": heard,
        "counted": env.runner.stats.total.num_requests,
    }


def reset() -> list[int]:
    env = environment()
    entry = bulk_requests(env)
    assert entry is not None and env.runner is not None
    entry.add("HTTP", "m", CONTEXT, 1.0, 10)  # the first is entered at once
    entry.add("HTTP", "m", CONTEXT, 1.5, 10)
    env.runner.stats.reset_all()  # as Locust resets: its statistics, then the event
    env.events.reset_stats.fire()
    entry.flush()
    after_reset = env.runner.stats.total.num_requests
    entry.add("HTTP", "m", CONTEXT, 2.0, 10)
    entry.flush()
    return [after_reset, env.runner.stats.total.num_requests]


def buckets() -> dict[str, bool]:
    """Locust's response-time buckets counted at once against its own function, over every
    band and on half-way points; and a locustfile's replacement of that function obeyed."""
    generator = np.random.default_rng(11)
    latencies = np.concatenate(
        [
            generator.uniform(low, high, 2_000)
            for low, high in ((0, 100), (100, 1_000), (1_000, 10_000), (10_000, 200_000))
        ]
        + [np.array([0.5, 1.5, 2.5, 99.5, 145.0, 155.0, 1_250.0, 12_500.0, 99_999.9])]
    )

    def by_locust() -> dict[int, int]:
        return dict(collections.Counter(map(locust.stats.bucket_response_time, latencies)))

    same = response_time_buckets(latencies) == by_locust()
    original = locust.stats.bucket_response_time
    locust.stats.bucket_response_time = lambda ms: int(ms // 7)
    try:
        replaced = response_time_buckets(latencies) == by_locust()
    finally:
        locust.stats.bucket_response_time = original
    return {"as Locust's": same, "as a replacement's": replaced}


def main() -> None:
    by_event, in_bulk = environment(), environment()
    feed(by_event, one_by_one=True)
    feed(in_bulk, one_by_one=False)
    report = {
        "by event": figures(by_event),
        "in bulk": figures(in_bulk),
        "another listener": another_listener(),
        "reset": reset(),
        "buckets": buckets(),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
