"""Triton's statistics API as deltas around a block of work.

The server updates statistics after it has sent responses, so a read right after the last
response can miss the last executions: reads retry within a short window until the counters
reach what the caller expects (or stop moving).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from pytest_triton.client.triton_client import TritonClient

PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class Duration:
    count: int = 0
    ns: int = 0

    def __sub__(self, other: Duration) -> Duration:
        return Duration(self.count - other.count, self.ns - other.ns)

    @property
    def avg_us(self) -> float:
        return self.ns / self.count / 1e3 if self.count else 0.0

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> Duration:
        raw = raw or {}
        return cls(int(raw.get("count", 0)), int(raw.get("ns", 0)))


@dataclass(frozen=True)
class ModelStats:
    """Cumulative counters of one model version, or the difference of two readings.

    inference_count counts samples (batch rows), success.count requests, execution_count
    model executions; dynamic batching shows as executions < requests.
    """

    inference_count: int = 0
    execution_count: int = 0
    success: Duration = Duration()
    fail: Duration = Duration()
    queue: Duration = Duration()
    compute_input: Duration = Duration()
    compute_infer: Duration = Duration()
    compute_output: Duration = Duration()
    batches: Mapping[int, int] = field(default_factory=dict)  # batch size -> executions

    @classmethod
    def from_response(cls, response: Mapping[str, Any], version: str = "") -> ModelStats:
        """Sum the versions in a statistics answer (or take the one asked for)."""
        total = cls()
        for entry in response.get("model_stats", []):
            if version and str(entry.get("version")) != version:
                continue
            total = total + cls._from_entry(entry)
        return total

    @classmethod
    def _from_entry(cls, entry: Mapping[str, Any]) -> ModelStats:
        inf = entry.get("inference_stats", {})
        batches = {
            int(b["batch_size"]): Duration.of(b.get("compute_infer")).count
            for b in entry.get("batch_stats", [])
        }
        return cls(
            inference_count=int(entry.get("inference_count", 0)),
            execution_count=int(entry.get("execution_count", 0)),
            success=Duration.of(inf.get("success")),
            fail=Duration.of(inf.get("fail")),
            queue=Duration.of(inf.get("queue")),
            compute_input=Duration.of(inf.get("compute_input")),
            compute_infer=Duration.of(inf.get("compute_infer")),
            compute_output=Duration.of(inf.get("compute_output")),
            batches={k: v for k, v in batches.items() if v},
        )

    def _combine(self, other: ModelStats, sign: int) -> ModelStats:
        values: dict[str, Any] = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, Duration):
                values[f.name] = Duration(a.count + sign * b.count, a.ns + sign * b.ns)
            elif isinstance(a, int):
                values[f.name] = a + sign * b
        keys = set(self.batches) | set(other.batches)
        merged = {k: self.batches.get(k, 0) + sign * other.batches.get(k, 0) for k in keys}
        values["batches"] = {k: v for k, v in sorted(merged.items()) if v}
        return ModelStats(**values)

    def __add__(self, other: ModelStats) -> ModelStats:
        return self._combine(other, +1)

    def __sub__(self, other: ModelStats) -> ModelStats:
        return self._combine(other, -1)

    @property
    def requests(self) -> int:
        return self.success.count

    @property
    def avg_batch_size(self) -> float:
        return self.inference_count / self.execution_count if self.execution_count else 0.0

    def latency_breakdown_us(self) -> dict[str, float]:
        """Average per-request server latency and its parts, as perf_analyzer prints them."""
        parts = {p: getattr(self, p).avg_us for p in PHASES}
        total = self.success.avg_us
        return {"request": total, **parts, "overhead": max(total - sum(parts.values()), 0.0)}

    def describe(self) -> str:
        b = self.latency_breakdown_us()
        hist = ", ".join(f"{k}x{v}" for k, v in sorted(self.batches.items())) or "none"
        return (
            f"requests {self.requests}, inference count {self.inference_count}, execution "
            f"count {self.execution_count}, avg batch {self.avg_batch_size:.2f}, batch sizes "
            f"[{hist}]; avg request {b['request']:.0f} us = queue {b['queue']:.0f} + compute "
            f"input {b['compute_input']:.0f} + infer {b['compute_infer']:.0f} + output "
            f"{b['compute_output']:.0f} + overhead {b['overhead']:.0f}"
        )


def read_stats(client: TritonClient, model: str, version: str = "") -> ModelStats:
    return ModelStats.from_response(client.statistics(model, version), version)


def read_replica_stats(
    clients: Sequence[TritonClient], model: str, version: str = ""
) -> dict[str, ModelStats]:
    """Each replica's counters, by its URL: behind a load balancer one statistics call
    answers from one replica only."""
    return {client.url: read_stats(client, model, version) for client in clients}


def replica_table(per_replica: Mapping[str, ModelStats]) -> str:
    """How the load spread over the replicas, as a markdown table."""
    total = sum((s.requests for s in per_replica.values()), 0)
    lines = [
        "| replica | requests | share | executions | avg batch |",
        "|---|---:|---:|---:|---:|",
    ]
    for url, stats in per_replica.items():
        share = 100.0 * stats.requests / total if total else 0.0
        lines.append(
            f"| {url} | {stats.requests} | {share:.0f}% | {stats.execution_count} | "
            f"{stats.avg_batch_size:.2f} |"
        )
    return "\n".join(lines)


class StatsWindow:
    """`with StatsWindow(client, model) as w: ...` then `w.delta` holds what the block did.

    With `replicas` (a client per server replica behind the client's load balancer) the
    counters are read from each replica and summed; `per_replica` keeps each one's delta.
    """

    def __init__(
        self,
        client: TritonClient,
        model: str,
        version: str = "",
        *,
        expect_requests: int | None = None,
        settle_s: float = 3.0,
        poll_s: float = 0.05,
        replicas: Sequence[TritonClient] = (),
    ) -> None:
        self.client, self.model, self.version = client, model, version
        self.expect_requests = expect_requests
        self.settle_s, self.poll_s = settle_s, poll_s
        self.sources = list(replicas) or [client]
        self._before: dict[str, ModelStats] = {}
        self.before = ModelStats()
        self.delta = ModelStats()
        self.per_replica: dict[str, ModelStats] = {}

    def _read(self) -> ModelStats:
        now = read_replica_stats(self.sources, self.model, self.version)
        self.per_replica = {url: now[url] - self._before.get(url, ModelStats()) for url in now}
        return sum(self.per_replica.values(), ModelStats())

    def __enter__(self) -> StatsWindow:
        self._before = read_replica_stats(self.sources, self.model, self.version)
        self.before = sum(self._before.values(), ModelStats())
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.delta = self.settle()

    def settle(self) -> ModelStats:
        """Read until the expected request count shows (or two reads agree), within the window."""
        deadline = time.monotonic() + self.settle_s
        last = self._read()
        while time.monotonic() < deadline:
            if self.expect_requests is not None and last.requests >= self.expect_requests:
                return last
            time.sleep(self.poll_s)
            now = self._read()
            if self.expect_requests is None and now == last:
                return now
            last = now
        return last


def assert_dynamic_batching(delta: ModelStats, *, min_batch_size: int = 2) -> None:
    """Fail unless some execution combined several requests into a batch >= min_batch_size."""
    combined = delta.requests > delta.execution_count > 0
    big = any(size >= min_batch_size for size in delta.batches)
    if not (combined and big):
        raise AssertionError(
            "dynamic batching did not happen: every request ran on its own. "
            f"{delta.describe()}. Check that the model has a dynamic_batching block and that "
            "requests were in flight together."
        )
