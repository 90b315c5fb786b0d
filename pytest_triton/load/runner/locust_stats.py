"""Locust's statistics entered in bulk, and its request listeners read.

Locust's public way in is one `request` event per request, which calls every listener, and
`StatsEntry.log()` per request. A multiplexed load generator enters a second of answers at
once (load/runner/bulk_requests.py) and needs to know that nobody but Locust's statistics
and our window log listens. Relied on: `EventHook._handlers`; the statistics listener that
`Runner.__init__` adds (its module and qualified name); `StatsEntry`'s counters
(`num_requests`, `num_reqs_per_sec`, `last_request_timestamp`, `total_response_time`,
`min_response_time`, `max_response_time`, `response_times`, `total_content_length`,
`use_response_times_cache`) and `_cache_response_times(second)`, which `log()` calls as
each second begins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from locust.env import Environment
from locust.stats import StatsEntry

STATISTICS_LISTENER = ("locust.runners", "Runner.__init__.<locals>.on_request")
"""Where the listener that feeds a runner's statistics is defined."""


def request_listeners(environment: Environment) -> list[Callable[..., Any]]:
    """The callables the request event calls, in order."""
    return list(environment.events.request._handlers)


def is_statistics_listener(handler: Callable[..., Any]) -> bool:
    """Whether `handler` is Locust's own: the one its runner adds for its statistics."""
    where = (getattr(handler, "__module__", None), getattr(handler, "__qualname__", ""))
    return where == STATISTICS_LISTENER


def enter_second(
    stats: StatsEntry,
    at: float,
    count: int,
    total_ms: float,
    low_ms: float,
    high_ms: float,
    buckets: dict[int, int],
    size: int,
) -> None:
    """`count` requests that ended within one second, the last at `at`, entered as that
    many StatsEntry.log() calls would enter them."""
    entry: Any = stats  # typed int where Locust keeps the float latencies events pass
    second = int(at)
    last = entry.last_request_timestamp
    if entry.use_response_times_cache and last and second > int(last):
        entry._cache_response_times(second - 1)
    entry.num_requests += count
    entry.num_reqs_per_sec[second] += count
    entry.last_request_timestamp = at
    entry.total_response_time += total_ms
    least = entry.min_response_time
    entry.min_response_time = low_ms if least is None else min(least, low_ms)
    entry.max_response_time = max(entry.max_response_time, high_ms)
    times = entry.response_times
    for bucket, n in buckets.items():
        times[bucket] += n
    entry.total_content_length += size
