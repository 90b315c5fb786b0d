"""The load generator of `triton-perf`: a Locust runner in library mode, one point per command.

Runs in its own process, started by sweep.py as `python -c "import locust; ..."` so that gevent
patches the process before anything else is imported. Commands arrive as JSON lines on stdin,
each answered by one JSON line on stdout (a measured point, or an error).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import gevent
import numpy as np
import psutil
from gevent.fileobject import FileObject
from locust.env import Environment
from locust.event import Events

from ..client import TritonClient
from ..config import from_values, resolve
from ..stats import ModelStats, read_stats
from .embedded import model_source
from .options import attach_config
from .users import TritonUser


class Generator:
    """Keeps one runner per batch size; changes only the user count between concurrencies."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.host: str = config["host"]
        self.model_name: str = config["model"]
        self.config = resolve(from_values(config["config"], "triton-perf"))
        self.served = model_source(config["source"], config["size"], config["format"])
        self.stats_client = TritonClient(config["stats_url"], config["stats_protocol"],
                                         timeout_s=30)
        self.env: Environment | None = None
        self.batch_size = 0
        self.samples: list[tuple[float, bool]] = []
        self.process = psutil.Process()

    def _runner_for(self, batch_size: int) -> Environment:
        if self.env is not None and self.batch_size == batch_size:
            return self.env
        self.close_runner()
        user = type("SweepUser", (TritonUser,), {
            "served": self.served, "model": self.model_name, "batch_size": batch_size,
            "host": self.host})
        env = Environment(user_classes=[user], events=Events(), host=self.host)
        attach_config(env, self.config)
        env.events.request.add_listener(self._on_request)
        env.create_local_runner()
        self.env, self.batch_size = env, batch_size
        return env

    def _on_request(self, response_time: float, exception: Exception | None = None,
                    **_: Any) -> None:
        self.samples.append((response_time, exception is None))

    def close_runner(self) -> None:
        if self.env is not None and self.env.runner is not None:
            self.env.runner.quit()
        self.env = None

    def measure(self, batch_size: int, concurrency: int, warmup_s: float,
                interval_s: float) -> dict[str, Any]:
        env = self._runner_for(batch_size)
        runner = env.runner
        assert runner is not None
        runner.start(concurrency, spawn_rate=100)
        deadline = time.monotonic() + 30
        while runner.user_count != concurrency and time.monotonic() < deadline:
            gevent.sleep(0.02)
        gevent.sleep(warmup_s)
        before = read_stats(self.stats_client, self.model_name)
        cpu0 = sum(self.process.cpu_times()[:2])
        self.samples = []
        start = time.monotonic()
        gevent.sleep(interval_s)
        window = self.samples
        self.samples = []
        elapsed = time.monotonic() - start
        cpu = 100 * (sum(self.process.cpu_times()[:2]) - cpu0) / elapsed
        delta: ModelStats = read_stats(self.stats_client, self.model_name) - before
        ok = np.array([t for t, good in window if good], dtype=np.float64)
        pct = (np.percentile(ok, [50, 90, 95, 99]) if ok.size
               else np.full(4, np.nan))
        b = delta.latency_breakdown_us()
        return {
            "batch_size": batch_size, "concurrency": concurrency, "duration_s": elapsed,
            "requests": len(window), "failures": int(len(window) - ok.size),
            "avg_ms": float(ok.mean()) if ok.size else float("nan"),
            "p50_ms": float(pct[0]), "p90_ms": float(pct[1]), "p95_ms": float(pct[2]),
            "p99_ms": float(pct[3]),
            "server_queue_us": b["queue"], "server_compute_input_us": b["compute_input"],
            "server_compute_infer_us": b["compute_infer"],
            "server_compute_output_us": b["compute_output"],
            "server_overhead_us": b["overhead"], "server_request_us": b["request"],
            "server_avg_batch": delta.avg_batch_size, "generator_cpu_percent": cpu,
        }


def main() -> int:
    stdin = FileObject(sys.stdin.fileno(), "r", close=False)  # cooperative: users keep going

    def answer(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    generator: Generator | None = None
    try:
        for line in stdin:
            command = json.loads(line)
            try:
                if command["op"] == "config":
                    generator = Generator(command)
                    answer({"ok": True})
                elif command["op"] == "measure" and generator is not None:
                    answer(generator.measure(command["batch_size"], command["concurrency"],
                                             command["warmup_s"], command["interval_s"]))
                else:
                    break
            except Exception as exc:  # report to the orchestrator, which names the point
                answer({"error": f"{type(exc).__name__}: {exc}"})
    except KeyboardInterrupt:
        return 130
    finally:
        if generator is not None:
            generator.close_runner()
    return 0
