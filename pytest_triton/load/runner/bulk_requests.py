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
from typing import Any

import locust.stats
import numpy as np
import numpy.typing as npt
from locust.env import Environment
from locust.stats import StatsEntry

from pytest_triton.load.measure.window_log import WindowLog, runs
from pytest_triton.load.runner import locust_stats
from pytest_triton.load.runner.recording import window_log
from pytest_triton.load.runner.run_state import StateKey, run_state

FLUSH_S = 0.05
Key = tuple[str, str, int]
"""(request type, name, rows each)."""
_LOCUSTS_BUCKETS = locust.stats.bucket_response_time
Floats = npt.NDArray[np.float64]


class _Kept:
    """Successful requests of one key not yet entered, as columns (three appends a request,
    arrays at the flush)."""

    __slots__ = ("at", "latency_ms", "size")

    def __init__(self) -> None:
        self.at: list[float] = []  # completion time.time()
        self.latency_ms: list[float] = []
        self.size: list[int] = []  # answer bytes


class BulkRequests:
    """One process's successful requests not yet entered, by (type, name, rows each)."""

    def __init__(self, environment: Environment, log: WindowLog) -> None:
        self._environment = environment
        self._log = log
        self._pending: dict[Key, _Kept] = {}
        self._contexts: dict[Key, dict[str, Any]] = {}
        self._flush_at = 0.0

    def add(
        self, request_type: str, name: str, context: dict[str, Any], latency_ms: float, size: int
    ) -> None:
        """One successful request; `context` as its event's (rows in "batch_size")."""
        now = time.time()
        key = (request_type, name, int(context.get("batch_size") or 0))
        kept = self._pending.get(key)
        if kept is None:
            kept = self._pending[key] = _Kept()
            self._contexts[key] = context
        kept.at.append(now)
        kept.latency_ms.append(latency_ms)
        kept.size.append(size)
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
        for (request_type, name, samples), kept in pending.items():
            at, latency_ms = np.array(kept.at), np.array(kept.latency_ms)
            sizes = np.array(kept.size, dtype=np.int64)
            entries = (runner.stats.total, runner.stats.get(name, request_type))
            _enter(entries, at, latency_ms, sizes)
            self._log.record_many(name, at + offset, latency_ms, samples)

    def drop(self, **_: Any) -> None:
        """Locust's statistics started over: what is kept belongs to before."""
        self._pending = {}


def _enter(
    entries: tuple[StatsEntry, ...], at: Floats, latency_ms: Floats, sizes: npt.NDArray[np.int64]
) -> None:
    """StatsEntry.log() for each request (in completion order) into each of `entries`, a
    second at a time (Locust keeps a copy of its buckets as each second begins)."""
    for start, stop in runs(at.astype(np.int64)):
        _enter_second(entries, float(at[stop - 1]), latency_ms[start:stop], sizes[start:stop])


def _enter_second(
    entries: tuple[StatsEntry, ...], at: float, latency_ms: Floats, sizes: npt.NDArray[np.int64]
) -> None:
    count, total = len(latency_ms), float(latency_ms.sum())
    low, high = float(latency_ms.min()), float(latency_ms.max())
    buckets = response_time_buckets(latency_ms)
    size = int(sizes.sum())
    for stats in entries:
        locust_stats.enter_second(stats, at, count, total, low, high, buckets, size)


def response_time_buckets(latency_ms: Floats) -> dict[int, int]:
    """How many latencies fall in each of Locust's response-time buckets
    (locust.stats.bucket_response_time: whole ms below 100, then two significant digits):
    with Locust's own rounding at once, else one call of a replacement each."""
    bucket = locust.stats.bucket_response_time
    if bucket is not _LOCUSTS_BUCKETS:
        found: dict[int, int] = {}
        for latency in latency_ms.tolist():
            key = bucket(latency)
            found[key] = found.get(key, 0) + 1
        return found
    # round(x, -n) as Locust rounds: half to even (numpy's rint) at the band's power of 10 (a
    # latency within a float's rounding error of a half-way point may take the next bucket)
    scale = np.select(
        [latency_ms < 100, latency_ms < 1000, latency_ms < 10000], [1.0, 10.0, 100.0], 1000.0
    )
    rounded = (np.rint(latency_ms / scale) * scale).astype(np.int64)
    values, counts = np.unique(rounded, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def _fire(
    environment: Environment,
    pending: dict[Key, _Kept],
    contexts: dict[Key, dict[str, Any]],
) -> None:
    for key, kept in pending.items():
        request_type, name, _ = key
        context = contexts[key]
        for latency, size in zip(kept.latency_ms, kept.size, strict=True):
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
    return all(
        getattr(handler, "__self__", None) is log or locust_stats.is_statistics_listener(handler)
        for handler in locust_stats.request_listeners(environment)
    )


def flush_requests(environment: Environment) -> None:
    """Enter what this process keeps now: before windows are cut up to the present."""
    found = run_state(environment).get(BULK)
    if found is not None:
        found.flush()


def bulk_requests(environment: Environment) -> BulkRequests | None:
    """This process's bulk entry, or None where requests must fire their events one by one
    (no window log, or another listener on the request event)."""
    found = run_state(environment).get(BULK)
    if found is not None:
        return found if only_known_listeners(environment, found._log) else None
    log = window_log(environment)
    if log is None or not only_known_listeners(environment, log):
        return None
    found = BulkRequests(environment, log)
    run_state(environment)[BULK] = found
    events = environment.events
    events.test_stopping.add_listener(found.flush)
    events.test_stop.add_listener(found.flush)
    events.reset_stats.add_listener(found.drop)
    events.test_start.add_listener(found.drop)
    return found


BULK = StateKey[BulkRequests]("bulk requests")
