"""Successful requests entered into Locust's statistics and the window log in bulk.

Locust's request event costs every request a call per listener: Locust's statistics (two
entries, a response-time bucket, a per-second count each) and the window log (two slices and
their histograms). In a closed loop of small requests that was about half of the generator's
Python per request. Where nobody else listens (the event's listeners are Locust's own
statistics and this process's window log), a multiplexed user's successful answers are kept
in a list instead and entered every FLUSH_S, in bulk: the same counts, sums, buckets, seconds
and slices as one event each, at most FLUSH_S late. A failure always fires the event at once,
and where another listener joins (a locustfile's own hook), what is kept goes to it as events
and every later request fires one.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from locust.env import Environment
from locust.stats import StatsEntry, bucket_response_time

from pytest_triton.load.measure.window_log import WindowLog
from pytest_triton.load.runner.recording import window_log

FLUSH_S = 0.05
ATTRIBUTE = "pytest_triton_bulk_requests"
Completed = tuple[float, float, int]
"""One successful request: (completion time.time(), latency in ms, answer bytes)."""
Key = tuple[str, str, int]
"""(request type, name, rows each)."""


class BulkRequests:
    """One process's successful requests not yet entered, by (type, name, rows each)."""

    def __init__(self, environment: Environment, log: WindowLog) -> None:
        self._environment = environment
        self._log = log
        self._pending: dict[Key, list[Completed]] = {}
        self._contexts: dict[Key, dict[str, Any]] = {}
        self._flush_at = 0.0

    def add(
        self, request_type: str, name: str, context: dict[str, Any], latency_ms: float, size: int
    ) -> None:
        """One successful request; `context` as its event's (rows in "batch_size")."""
        now = time.time()
        key = (request_type, name, int(context.get("batch_size") or 0))
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = []
            self._contexts[key] = context
        pending.append((now, latency_ms, size))
        if now >= self._flush_at:
            self.flush()

    def flush(self, **_: Any) -> None:
        """Enter what is kept (also as Locust's test stops, before its last figures)."""
        self._flush_at = time.time() + FLUSH_S
        pending, self._pending = self._pending, {}
        if not pending:
            return
        runner = self._environment.runner
        if runner is None:
            return
        if not only_known_listeners(self._environment, self._log):
            _fire(self._environment, pending, self._contexts)
            return
        offset = self._log.clock() - time.time()  # a worker's log keeps the master's clock
        for (request_type, name, samples), completed in pending.items():
            _enter((runner.stats.total, runner.stats.get(name, request_type)), completed)
            self._log.record_many(
                name, [(at + offset, latency) for at, latency, _ in completed], samples
            )

    def drop(self, **_: Any) -> None:
        """Locust's statistics started over: what is kept belongs to before."""
        self._pending = {}


def _enter(entries: tuple[StatsEntry, ...], completed: list[Completed]) -> None:
    """StatsEntry.log() for each of `completed` (in completion order) into each of `entries`,
    a second at a time (Locust keeps a copy of its buckets as each second begins)."""
    start = 0
    second = int(completed[0][0])
    for i, (at, _, _) in enumerate(completed):
        if int(at) != second:
            _enter_second(entries, completed[start:i])
            second, start = int(at), i
    _enter_second(entries, completed[start:])


def _enter_second(entries: tuple[StatsEntry, ...], completed: list[Completed]) -> None:
    at = completed[-1][0]
    second = int(at)
    latencies = [latency for _, latency, _ in completed]
    count, total, low, high = len(latencies), sum(latencies), min(latencies), max(latencies)
    buckets = Counter(map(bucket_response_time, latencies))
    size = sum(size for _, _, size in completed)
    for stats in entries:
        entry: Any = stats  # typed int where Locust keeps the float latencies events pass
        last = entry.last_request_timestamp
        if entry.use_response_times_cache and last and second > int(last):
            entry._cache_response_times(second - 1)
        entry.num_requests += count
        entry.num_reqs_per_sec[second] += count
        entry.last_request_timestamp = at
        entry.total_response_time += total
        least = entry.min_response_time
        entry.min_response_time = low if least is None else min(least, low)
        entry.max_response_time = max(entry.max_response_time, high)
        times = entry.response_times
        for bucket, n in buckets.items():
            times[bucket] += n
        entry.total_content_length += size


def _fire(
    environment: Environment,
    pending: dict[Key, list[Completed]],
    contexts: dict[Key, dict[str, Any]],
) -> None:
    for key, completed in pending.items():
        request_type, name, _ = key
        context = contexts[key]
        for _, latency, size in completed:
            environment.events.request.fire(
                request_type=request_type,
                name=name,
                response_time=latency,
                response_length=size,
                exception=None,
                context=context,
            )


def only_known_listeners(environment: Environment, log: WindowLog) -> bool:
    """Whether the request event's listeners are Locust's statistics and `log`'s only."""
    for handler in environment.events.request._handlers:
        if getattr(handler, "__self__", None) is log:
            continue
        if (
            getattr(handler, "__module__", None) == "locust.runners"
            and getattr(handler, "__qualname__", "") == "Runner.__init__.<locals>.on_request"
        ):
            continue
        return False
    return True


def flush_requests(environment: Environment) -> None:
    """Enter what this process keeps now: before windows are cut up to the present."""
    found: BulkRequests | None = getattr(environment, ATTRIBUTE, None)
    if found is not None:
        found.flush()


def bulk_requests(environment: Environment) -> BulkRequests | None:
    """This process's bulk entry, or None where requests must fire their events one by one
    (no window log, or another listener on the request event)."""
    found: BulkRequests | None = getattr(environment, ATTRIBUTE, None)
    if found is not None:
        return found if only_known_listeners(environment, found._log) else None
    log = window_log(environment)
    if log is None or not only_known_listeners(environment, log):
        return None
    found = BulkRequests(environment, log)
    setattr(environment, ATTRIBUTE, found)
    events = environment.events
    events.test_stopping.add_listener(found.flush)
    events.test_stop.add_listener(found.flush)
    events.reset_stats.add_listener(found.drop)
    events.test_start.add_listener(found.drop)
    return found
