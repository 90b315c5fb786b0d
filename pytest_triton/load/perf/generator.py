"""The load generator of `triton-perf`: a Locust runner in library mode, one point per command.

Runs in its own process, started by sweep.py as `python -c "import locust; ..."` so that gevent
patches the process before anything else is imported. Commands arrive as JSON lines on stdin,
each answered by one JSON line on stdout (a measured point, or an error).
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import gevent
import psutil
from gevent.fileobject import FileObject
from locust.env import Environment
from locust.event import Events

from pytest_triton.base.config_resolution import client_security, resolve
from pytest_triton.base.setting_sources import from_values
from pytest_triton.base.urls import parse_url
from pytest_triton.client.stats import ModelStats, read_replica_stats
from pytest_triton.client.triton_client import Protocol, TritonClient
from pytest_triton.load.measure.arrivals import rate_warning
from pytest_triton.load.measure.goodput import goodput_between
from pytest_triton.load.measure.stream_log import StreamLog
from pytest_triton.load.measure.window_log import Slice, WindowLog
from pytest_triton.load.measure.windows import Criterion, Window, assess
from pytest_triton.load.perf.kind_users import kind_config, sweep_user
from pytest_triton.load.perf.kinds import Kind, KindTally, kind_figures, perf_source
from pytest_triton.load.runner import recording, stream_recording
from pytest_triton.load.runner.agreement import (
    agreement_counts,
    answers_checked,
    attach_agreement_tally,
)
from pytest_triton.load.runner.bulk_requests import flush_requests
from pytest_triton.load.runner.checking import WRONG_SO_FAR
from pytest_triton.load.runner.embedded import Served, model_source
from pytest_triton.load.runner.options import attach_config
from pytest_triton.load.runner.run_state import run_state

WINDOW_GRACE_S = 5.0
"""Per window, on top of its length, before a point that makes no progress is given up."""


class Generator:
    """Keeps one runner per batch size; changes only the user count between concurrencies."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.host: str = config["host"]
        self.model_name: str = config["model"]
        self.kind: Kind = config.get("kind", "single")
        self.config = kind_config(
            resolve(from_values(config["config"], "triton-perf")),
            self.kind,
            config.get("embedded"),
        )
        self.served: Served = (
            model_source(config["source"], config["size"], config["format"])
            if self.kind == "single"
            else perf_source(config["source"], config["size"], config["format"])
        )
        scheme = parse_url(self.host)[0]
        self.protocol: Protocol = "grpc" if scheme in ("grpc", "grpcs") else "http"
        self.tally = KindTally()
        self.streams: StreamLog | None = None
        self.stats_client = TritonClient(
            config["stats_url"],
            config["stats_protocol"],
            timeout_s=30,
            security=client_security(self.config, config.get("stats_tls", False)),
        )
        # Behind a load balancer one statistics call answers from one replica: with
        # --triton-replicas the server's figures are read from each and summed.
        self.replica_clients = [
            TritonClient(
                hostport,
                "http",
                timeout_s=30,
                security=client_security(self.config, scheme == "https"),
            )
            for scheme, hostport in (parse_url(u) for u in self.config.server.replicas)
        ]
        self.env: Environment | None = None
        self.batch_size = 0
        self.request_rate: float | None = None
        self.log = WindowLog()
        self.process = psutil.Process()

    def _runner_for(self, batch_size: int, request_rate: float | None) -> Environment:
        if self.env is not None and (self.batch_size, self.request_rate) == (
            batch_size,
            request_rate,
        ):
            return self.env
        self.close_runner()
        user = sweep_user(
            self.kind, self.served, self.model_name, self.host, batch_size, self.protocol
        )
        env = Environment(user_classes=[user], events=Events(), host=self.host)
        attach_config(env, self.config.with_overrides({"request_rate": request_rate}))
        self.log = recording.attach_window_log(env)
        if self.kind != "single":
            env.events.request.add_listener(self.tally.on_request)
        if self.kind == "stream":
            self.streams = stream_recording.attach_stream_log(env)
        env.create_local_runner()
        self.env, self.batch_size, self.request_rate = env, batch_size, request_rate
        return env

    def read_stats(self) -> dict[str, ModelStats]:
        """The model's counters by server: each replica's, or the one server's."""
        sources = self.replica_clients or [self.stats_client]
        return read_replica_stats(sources, self.model_name)

    def close_runner(self) -> None:
        if self.env is not None and self.env.runner is not None:
            self.env.runner.quit()
        self.env = None

    def measure(
        self,
        batch_size: int,
        concurrency: int,
        request_rate: float | None = None,
        percentile: int = 99,
        model: str | None = None,
        slo_ms: float | None = None,
    ) -> dict[str, Any]:
        """Warm up, then measure windows until the last N agree or --max-trials is reached
        (perf_analyzer's loop); an open loop runs one user at `request_rate`. `model` switches
        to another model of the same inputs (triton-tune's candidates); with `slo_ms` the
        answer's `goodput` is the share of the measured requests that succeeded within it."""
        c = self.config
        if model is not None and model != self.model_name:
            self.close_runner()
            self.model_name = model
        env = self._runner_for(batch_size, request_rate)
        runner = env.runner
        assert runner is not None
        users = 1 if request_rate else concurrency
        self.tally.clear()  # a point's answers checked and wrong, warm-up included
        attach_agreement_tally(env).reset()  # and its agreement rate
        wrong_so_far = run_state(env).get(WRONG_SO_FAR)
        if wrong_so_far is not None:  # each point's first wrong answers name the difference
            wrong_so_far.clear()
        flush_requests(env)
        self.log.clear()  # the point's requests from its first: warm-up included
        runner.start(users, spawn_rate=100)
        deadline = time.monotonic() + 30
        while runner.user_count != users and time.monotonic() < deadline:
            gevent.sleep(0.02)
        gevent.sleep(c.measurement.load_warmup / 1e3)
        before = self.read_stats()
        cpu0 = sum(self.process.cpu_times()[:2])
        flush_requests(env)  # the warm-up's last answers are cleared with it
        warmup = self.log.total()  # its requests count in the point's failures
        self.log.clear()
        if self.streams is not None:
            self.streams.clear()
        start, started = time.time(), time.monotonic()
        criterion = Criterion(
            c.measurement.stability_windows, c.measurement.stability_percentage, percentile
        )
        give_up = started + c.measurement.max_trials * (
            c.measurement.measurement_interval / 1e3 + WINDOW_GRACE_S
        )
        windows: list[Window] = []
        while time.monotonic() < give_up:
            gevent.sleep(0.1)
            flush_requests(env)  # the last FLUSH_S of answers belong in the windows cut now
            now = self.log.windows(
                start,
                time.time(),
                warmup_s=0,
                interval_s=c.measurement.measurement_interval / 1e3,
                mode=c.measurement.measurement_mode,
                request_count=c.measurement.measurement_request_count,
            )
            if len(now) == len(windows):
                continue
            windows = now[: c.measurement.max_trials]
            if assess(windows, criterion).stable or len(windows) >= c.measurement.max_trials:
                break
        runner.stop()
        flush_requests(env)
        whole = warmup  # the point's whole load: its failures by reason, the first first
        whole.add(self.log.total())
        elapsed = time.monotonic() - started
        cpu = 100 * (sum(self.process.cpu_times()[:2]) - cpu0) / elapsed
        after = self.read_stats()
        per_server = {url: after[url] - before.get(url, ModelStats()) for url in after}
        delta: ModelStats = sum(per_server.values(), ModelStats())
        stability = assess(windows, criterion)
        figures = stability.judged
        if figures is None:
            raise TimeoutError(
                f"no measurement window completed in {elapsed:.0f}s "
                f"(--triton-measurement-mode {c.measurement.measurement_mode})"
            )
        b = delta.latency_breakdown_us()
        goodput = None
        origin = math.ceil(start / self.log.slice_s - 1e-9) * self.log.slice_s
        first = origin + figures.start_s
        if slo_ms:  # over the measured windows' requests
            share = goodput_between(self.log, first, first + figures.duration_s, slo_ms)
            goodput = None if math.isnan(share) else share
        kind = (
            kind_figures(
                self.kind,
                self.tally,
                self.streams,
                first,
                figures.duration_s,
                stream_slo=bool(c.gate.perf_slo_ttft_ms or c.gate.perf_slo_itl_ms),
            )
            if self.kind != "single"
            else single_figures(whole, answers_checked(env))
        )
        agreed, judged = agreement_counts(env)
        return {
            "batch_size": batch_size,
            "concurrency": users,
            "request_rate_asked": request_rate,
            "duration_s": figures.duration_s,
            "requests": figures.requests,
            "failures": figures.failures,
            "avg_ms": figures.avg_ms,
            "p50_ms": figures.p50_ms,
            "p90_ms": figures.p90_ms,
            "p95_ms": figures.p95_ms,
            "p99_ms": figures.p99_ms,
            "latency_histogram": figures.histogram.encode() if figures.histogram else "",
            "server_queue_us": b["queue"],
            "server_compute_input_us": b["compute_input"],
            "server_compute_infer_us": b["compute_infer"],
            "server_compute_output_us": b["compute_output"],
            "server_overhead_us": b["overhead"],
            "server_request_us": b["request"],
            "server_avg_batch": delta.avg_batch_size,
            "server_executions": delta.execution_count,
            "server_batches": {str(k): v for k, v in delta.batches.items()},
            "server_requests": delta.requests,
            "server_replicas": (
                {
                    url: {"success_count": r.requests, "execution_count": r.execution_count}
                    for url, r in per_server.items()
                }
                if self.replica_clients
                else {}
            ),
            "generator_cpu_percent": cpu,
            "stable": stability.stable,
            "stability": stability.summary(),
            "windows": [w.as_dict() for w in windows],
            "goodput": goodput,
            "schedule_warning": (
                rate_warning(
                    request_rate, figures.requests / figures.duration_s, recording.schedule_lag(env)
                )
                if request_rate
                else None
            ),
            "answer_agreement": agreed / judged if judged else None,
            "agreement_samples": judged,
            "total_requests": whole.requests,
            "total_failures": whole.failures,
            "failure_reasons": whole.reasons.as_list(),
            **kind,
        }


def single_figures(whole: Slice, checked: int | None) -> dict[str, Any]:
    """A single model's answer checks over the point's whole load: answers judged against
    the reference (None where none are checked) and the wrong ones, the first in words."""
    return {
        "answers_checked": checked,
        "wrong_answers": whole.reasons.count("wrong answer"),
        "first_wrong_answer": whole.reasons.first("wrong answer"),
    }


def run_in_process() -> int:
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
                    answer(
                        generator.measure(
                            command["batch_size"],
                            command["concurrency"],
                            command.get("request_rate"),
                            command.get("percentile", 99),
                            command.get("model"),
                            command.get("slo_ms"),
                        )
                    )
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
