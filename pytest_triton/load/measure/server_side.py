"""The server's side of a load test, from Triton's statistics API, printed as perf_analyzer does.

Client latency alone cannot tell queueing from compute, nor show that the dynamic batcher
combined anything: the statistics delta over the run can (no locust import here).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_triton.base.errors import TritonTestError
from pytest_triton.base.security import PLAIN, Security
from pytest_triton.base.urls import parse_url
from pytest_triton.client.stats import ModelStats, StatsWindow, read_stats, replica_table
from pytest_triton.client.triton_client import Protocol, TritonClient

# Above this share of its CPU the load generator, not the server, shapes what is measured.
CPU_SATURATED_PERCENT = 90.0


@dataclass(frozen=True)
class ModelReport:
    """One model's statistics delta over a run, with the client's view of the same requests."""

    model: str
    delta: ModelStats
    client_requests: int | None = None
    client_avg_ms: float | None = None
    per_replica: Mapping[str, ModelStats] | None = None  # behind a balancer: each replica's

    @property
    def server_request_ms(self) -> float:
        return self.delta.success.avg_us / 1e3

    @property
    def client_overhead_ms(self) -> float | None:
        """Client latency minus server request latency: network, (de)serialization and the
        load generator's own scheduling."""
        if self.client_avg_ms is None or not self.delta.requests:
            return None
        return self.client_avg_ms - self.server_request_ms

    @property
    def in_flight_at_stop(self) -> int | None:
        """Requests the server answered that the client never counted: those in flight when
        the users were stopped (Locust stops a user mid-request; its answer comes back to no
        one). None where the client's count is unknown."""
        if self.client_requests is None:
            return None
        return max(0, self.delta.requests - self.client_requests)

    def reconciliation(self) -> str:
        """The client's count beside the server's, and what the difference is."""
        client = self.client_requests
        if client is None or client == self.delta.requests:
            return ""
        server = self.delta.requests
        if server > client:
            return (
                f"Client and server counts: the client counted {client} successful requests, "
                f"the server {server}: {server - client} in flight when the users stopped "
                "(answered after the client stopped counting)"
            )
        return (
            f"Client and server counts: the client counted {client} successful requests, "
            f"the server only {server}: {client - server} the server's statistics do not "
            "hold (another model version, or statistics read before they settled)"
        )

    def text(self) -> str:
        d = self.delta
        b = d.latency_breakdown_us()
        hist = ", ".join(f"{size} x {count}" for size, count in sorted(d.batches.items()))
        lines = [
            f"Server: {self.model}",
            f"  Inference count: {d.inference_count}",
            f"  Execution count: {d.execution_count}",
            f"  Successful request count: {d.requests}",
            f"  Failed request count: {d.fail.count}",
            f"  Avg batch size: {d.avg_batch_size:.2f}",
            f"  Batch size histogram (batch size x executions): {hist or 'none'}",
            f"  Avg request latency: {b['request']:.0f} usec (overhead {b['overhead']:.0f} usec"
            f" + queue {b['queue']:.0f} usec + compute input {b['compute_input']:.0f} usec"
            f" + compute infer {b['compute_infer']:.0f} usec + compute output "
            f"{b['compute_output']:.0f} usec)",
        ]
        reconciled = self.reconciliation()
        if reconciled:
            lines.append(f"  {reconciled}")
        overhead = self.client_overhead_ms
        if overhead is not None and self.client_avg_ms is not None:
            lines.append(
                f"  Client-side overhead: {overhead:.2f} ms per request (client avg "
                f"{self.client_avg_ms:.2f} ms - server request "
                f"{self.server_request_ms:.2f} ms)"
            )
        if self.per_replica:
            lines += ["  Load over the replicas (the figures above are their sum):"]
            lines += [f"  {row}" for row in replica_table(self.per_replica).splitlines()]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        d = self.delta
        return {
            "model": self.model,
            "inference_count": d.inference_count,
            "execution_count": d.execution_count,
            "success_count": d.requests,
            "client_success_count": self.client_requests,
            "in_flight_at_stop": self.in_flight_at_stop,
            "fail_count": d.fail.count,
            "avg_batch_size": d.avg_batch_size,
            "batch_histogram": {str(k): v for k, v in sorted(d.batches.items())},
            "latency_us": d.latency_breakdown_us(),
            "client_avg_ms": self.client_avg_ms,
            "client_overhead_ms": self.client_overhead_ms,
            "replicas": {
                url: {"success_count": r.requests, "execution_count": r.execution_count}
                for url, r in (self.per_replica or {}).items()
            },
        }


def generator_warnings(
    *,
    cpu_percent: float | None = None,
    cpu_warning: bool = False,
    reports: Sequence[ModelReport] = (),
) -> list[str]:
    """perf_analyzer warns when it cannot keep up with the load it was asked for; so do we,
    when the load generator's CPU is saturated or its own overhead dominates latency."""
    warnings = []
    if cpu_warning or (cpu_percent is not None and cpu_percent >= CPU_SATURATED_PERCENT):
        usage = f" (averaged {cpu_percent:.0f}% of a core)" if cpu_percent is not None else ""
        warnings.append(
            f"WARNING: the load generator's CPU was saturated{usage}: it could not keep up "
            "with the requested load, so throughput is a lower bound and latencies include "
            "client-side queueing. Spread the users over processes (--processes N) or machines."
        )
    for r in reports:
        overhead = r.client_overhead_ms
        if overhead is not None and r.client_avg_ms and overhead > 0.5 * r.client_avg_ms:
            warnings.append(
                f"WARNING: {r.model}: {overhead:.2f} ms of the {r.client_avg_ms:.2f} ms average "
                "client latency is spent outside the server (network, serialization, load "
                "generator): client latencies mostly measure the client here."
            )
    return warnings


class StatsTracker:
    """Statistics of some models from the start of a run to its end."""

    def __init__(
        self,
        url: str,
        protocol: Protocol,
        models: Sequence[str],
        security: Security = PLAIN,
        replicas: Sequence[str] = (),
    ) -> None:
        self.url, self.protocol, self.security = url, protocol, security
        self.models = list(dict.fromkeys(models))
        self.replicas = list(replicas)  # http(s):// URLs of the servers behind `url`'s balancer
        self._client: TritonClient | None = None
        self._replica_clients: list[TritonClient] = []
        self._windows: dict[str, StatsWindow] = {}
        self.errors: list[str] = []

    def start(self) -> None:
        self.errors = []
        self._client = self._client or TritonClient(
            self.url, self.protocol, timeout_s=30, security=self.security
        )
        if self.replicas and not self._replica_clients:
            self._replica_clients = []
            for url in self.replicas:
                scheme, hostport = parse_url(url, "http")
                security = self.security.for_protocol(scheme == "https")
                self._replica_clients.append(
                    TritonClient(hostport, "http", timeout_s=30, security=security)
                )
        self._windows = {}
        for model in self.models:
            window = StatsWindow(self._client, model, replicas=self._replica_clients)
            try:
                window.__enter__()
            except (TritonTestError, OSError) as exc:
                self.errors.append(f"cannot read statistics of {model!r}: {exc}")
                continue
            self._windows[model] = window

    def finish(
        self,
        client_counts: Mapping[str, int] | None = None,
        client_avg_ms: Mapping[str, float] | None = None,
    ) -> list[ModelReport]:
        """Deltas since start(), waiting briefly for the counters to catch up with the client."""
        reports = []
        counts = client_counts or {}
        for model, window in self._windows.items():
            window.expect_requests = counts.get(model)
            try:
                delta = window.settle()
            except (TritonTestError, OSError) as exc:
                self.errors.append(f"cannot read statistics of {model!r}: {exc}")
                continue
            reports.append(
                ModelReport(
                    model,
                    delta,
                    counts.get(model),
                    (client_avg_ms or {}).get(model),
                    dict(window.per_replica) if self.replicas else None,
                )
            )
        return reports

    def current(self) -> dict[str, ModelStats | None]:
        """Deltas since start() as the server counts them right now (no waiting: for a live
        view); None for a model whose statistics cannot be read."""
        deltas: dict[str, ModelStats | None] = {}
        for model in self.models:
            window = self._windows.get(model)
            try:
                deltas[model] = (
                    None
                    if window is None
                    else read_stats(window.client, model, window.version) - window.before
                )
            except (TritonTestError, OSError):
                deltas[model] = None
        return deltas

    def close(self) -> None:
        for client in [*self._replica_clients, *([self._client] if self._client else [])]:
            with contextlib.suppress(Exception):  # a dead server must not turn into a traceback
                client.close()
        self._client, self._replica_clients = None, []
