"""One Locust process's part of a load test, made at Locust's init event (the master, or the
single local process; workers only send load): the host check, the embedded server, the
server-side statistics and the monitor of a run.
"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.lock
from locust.env import Environment

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import (
    check_goodput,
    check_replicas_behind,
    check_stream_goodput,
)
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_sources import check_environ
from pytest_triton.base.urls import check_host
from pytest_triton.load.measure.run_length import fit_to_run, fitted, window_text
from pytest_triton.load.measure.server_side import ModelReport, StatsTracker
from pytest_triton.load.preflight import preflight_load
from pytest_triton.load.runner.embedded import (
    EmbeddedServer,
    Served,
    check_gpu_host,
    served_format,
)
from pytest_triton.load.runner.monitor import RunMonitor
from pytest_triton.load.runner.options import run_config
from pytest_triton.load.runner.rollout import PlannedUpdate, plan_update
from pytest_triton.load.runner.run_state import StateKey, run_state
from pytest_triton.load.runner.scrape import (
    Scraper,
    embedded_pid,
    metrics_security,
    metrics_url,
    server_process,
    soak_wanted,
)
from pytest_triton.load.runner.shapes import install_shape
from pytest_triton.load.runner.user_settings import (
    check_load_allowed,
    checked_shared_memory,
    stats_protocol,
    user_endpoint,
    user_model,
    user_protocol,
    user_security,
)

log = logging.getLogger("pytest_triton.load")
DEFAULT_RUN_TIME_S = 30


def run_of(environment: Environment) -> LoadRun | None:
    return run_state(environment).get(RUN)


def _user_hosts(environment: Environment) -> set[str]:
    return {str(c.host) for c in environment.user_classes if getattr(c, "host", None)}


def current_host(environment: Environment) -> str | None:
    if environment.host:
        return environment.host
    hosts = _user_hosts(environment)
    return next(iter(hosts)) if len(hosts) == 1 else None


def served_models(classes: Iterable[Any]) -> list[Served]:
    served: list[Served] = []
    for cls in classes:
        model = getattr(cls, "served", None)
        if model is None:
            raise ConfigError(
                f"no --host given and {cls.__name__} serves no model itself "
                "(set its `served` attribute, or pass --host URL)"
            )
        if model not in served:
            served.append(model)
    return served


def check_serve_address(address: str) -> None:
    """The embedded server's address is handed to workers: it must name one address."""
    try:
        unspecified = ipaddress.ip_address(address.strip("[]")).is_unspecified
    except ValueError:
        raise ConfigError(
            f"--triton-serve-address {address!r} is not an IP address: give one address of "
            "this machine that the workers reach (e.g. 10.0.0.5)"
        ) from None
    if unspecified:
        raise ConfigError(
            f"--triton-serve-address {address} listens everywhere but names no address that "
            "workers can reach: give one address of this machine (e.g. 10.0.0.5)"
        )


@dataclass
class LoadRun:
    """What the master (or local) process knows about the current run."""

    environment: Environment
    config: TritonConfig
    server: EmbeddedServer | None = None
    embedded_host: str | None = None
    tracker: StatsTracker | None = None
    monitor: RunMonitor | None = None
    scraper: Scraper | None = None
    started: bool = False
    finished: bool = False
    refused: bool = False  # the run's settings were refused at its start: no load goes out
    refusal: str = ""  # ... and why, for the web UI's Triton tab
    cpu_percent: float | None = None
    cpu_warning: bool = False
    reports: list[ModelReport] = field(default_factory=list)
    update: PlannedUpdate | None = None  # --triton-update-to
    client_counts: dict[str, int] = field(default_factory=dict)  # what reports settled on
    summary: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    printed: bool = False
    started_at: float = 0.0  # wall clock, as the window log keys requests
    stopped_at: float = 0.0
    _stop_lock: gevent.lock.Semaphore = field(default_factory=gevent.lock.Semaphore)

    @classmethod
    def create(cls, environment: Environment) -> LoadRun:
        """Resolve the run's settings (a bad one raises ConfigError before any load; so does a
        TRITON_* variable of a setting Locust does not take)."""
        check_environ(os.environ, "locust")
        run = cls(environment, run_config(environment))
        check_goodput(run.config)
        check_stream_goodput(run.config)
        run_state(environment)[RUN] = run
        atexit.register(run.stop_server)
        return run

    def resolve(self) -> TritonConfig:
        """The run's settings (options.run_config), its windows fitted to its -t (a run too
        short for the measurement its targets are judged on raises ConfigError)."""
        options = self.environment.parsed_options
        run_time = getattr(options, "run_time", None)
        return fit_to_run(run_config(self.environment), float(run_time) if run_time else None)

    # -- before the run ------------------------------------------------------------------
    def prepare(self) -> None:
        """Bound a headless run, check the host, or start the embedded server."""
        options = self.environment.parsed_options
        assert options is not None  # only made for the locust command line
        shape = install_shape(self.environment, self.config)
        if shape is not None:
            log.info(
                "pytest-triton: traffic shape %s: %s",
                self.config.load.shape,
                ", ".join(f"{s.label} for {s.duration_s:g}s" for s in shape.stages),
            )
        elif options.headless and not options.run_time:
            options.run_time = DEFAULT_RUN_TIME_S
            log.info(
                "pytest-triton: no --run-time given: the test stops after %ss (pass -t to "
                "change it)",
                DEFAULT_RUN_TIME_S,
            )
        self.config = self.resolve()  # a run too short to measure is refused here
        host = current_host(self.environment)
        check_replicas_behind(self.config, host, "--host")
        check_gpu_host(self.config, host, "--host")
        transport = checked_shared_memory(self.config, host)
        if transport != "none":
            log.info("pytest-triton: tensors travel through %s shared memory", transport)
        if host:
            check_host(host, self.config.load.allow_remote)
            plan_update(self.config, None)  # refused: only the embedded server's model
            if options.headless:  # with the web UI: when the run starts (its host may change)
                self.preflight(host)
        elif len(_user_hosts(self.environment)) <= 1:
            self.start_server()
        # several explicit class hosts: each is checked when its users start

    def preflight(self, host: str) -> None:
        """One request to the host, over each protocol its Triton users send on, before any
        user starts: a refusal (401/403, TLS, a closed port) ends the run at once, naming the
        option that fixes it (RefusedError). Users that send no Triton requests ask nothing."""
        users = [c for c in self.environment.user_classes if getattr(c, "triton_preflight", 0)]
        if not users or host == self.embedded_host:
            return
        turns = range(max(1, len(self.config.client.protocol or ())))
        protocols = [user_protocol(c, host, self.config, i) for c in users for i in turns]
        preflight_load(host, "--host", protocols, self.config)

    def start_server(self) -> None:
        environment = self.environment
        options = environment.parsed_options
        assert options is not None
        check_serve_address(self.config.server.serve_address)
        models = served_models(environment.user_classes)
        fmt = served_format(self.config, models)  # with --triton-gpu: the GPU preflight
        if fmt != self.config.serving.format:  # the users (and workers) name the same model
            options.triton_format = fmt
            self.config = self.resolve()
        server = EmbeddedServer(models, self.config.serving.format, config=self.config)
        self.server = server
        log.info(
            "pytest-triton: no --host given: starting an embedded tritonserver for %s",
            ", ".join(server.model_names()),
        )
        started = time.monotonic()
        endpoints = server.start()
        protocol = (self.config.client.protocol or ("http",))[0]
        environment.host = self.embedded_host = f"{protocol}://{endpoints.url(protocol)}"
        options.host = environment.host
        options.triton_endpoints = endpoints.encode()  # workers get the master's options
        self.config = self.resolve()
        self.update = plan_update(self.config, server)
        log.info(
            "pytest-triton: embedded server ready in %.1fs at http://%s and grpc://%s; "
            "load goes to %s",
            time.monotonic() - started,
            endpoints.http,
            endpoints.grpc,
            environment.host,
        )

    def stop_server(self) -> None:
        """Idempotent, and a second caller waits for the first: on SIGTERM Locust runs its
        shutdown twice, and the process must not exit while the server is still stopping."""
        with self._stop_lock:
            server, self.server = self.server, None
            if server is not None:
                server.stop()

    # -- the run -------------------------------------------------------------------------
    def start(self) -> None:
        """Baseline of the server's statistics, and the monitor."""
        environment = self.environment
        self.started, self.finished, self.refused, self.refusal = True, False, False, ""
        self.reports, self.cpu_percent, self.cpu_warning = [], None, False
        self.client_counts = {}
        self.result, self.summary, self.printed = {}, "", False
        self.started_at, self.stopped_at = time.time(), 0.0
        if not environment.host and self.embedded_host:
            environment.host = self.embedded_host  # the web UI's host field was cleared
        host = current_host(environment)
        if host is None:
            return
        self.config = config = self.resolve()
        check_load_allowed(host, config)
        if fitted(config):
            log.info(
                "pytest-triton: measurement windows of %s (--triton-measurement-interval not set)",
                window_text(config),
            )
        options = environment.parsed_options
        if options is not None and not options.headless:
            self.preflight(host)  # headless runs asked before their users spawned
        models = [user_model(c, config) for c in environment.user_classes]
        protocol = stats_protocol(host, config)
        if self.tracker is not None:
            self.tracker.close()
        self.tracker = StatsTracker(
            user_endpoint(protocol, host, config),
            protocol,
            models,
            user_security(protocol, host, config),
            replicas=config.server.replicas,
        )
        self.tracker.start()
        for error in self.tracker.errors:
            log.warning("pytest-triton: %s", error)
        self.monitor = RunMonitor(
            environment, config.load.max_requests, self.end, self.server_death
        )
        self.monitor.start()
        if self.update is not None:
            self.update.start(environment)
        self.scraper = None
        if soak_wanted(config):
            server = self.server
            embedded = server.endpoints.metrics if server and server.deployment else None
            url = metrics_url(config, embedded, host)
            self.scraper = Scraper(
                url,
                server_process(embedded_pid(server), host),
                metrics_security(config, url),
            )
            self.scraper.start()

    def server_death(self) -> str | None:
        """How the embedded server died, if it did."""
        deployment = self.server.deployment if self.server is not None else None
        death = deployment.server.death if deployment is not None else None
        return death.headline if death is not None else None

    def end(self, reason: str) -> None:
        """Stop the run as -t does: quit when headless, stop (keep the UI) otherwise."""
        runner = self.environment.runner
        if runner is None:
            return
        log.info("pytest-triton: %s, stopping the test", reason)
        options = self.environment.parsed_options
        if options is not None and options.headless:
            runner.quit()
        else:
            runner.stop()

    def finish(self) -> None:
        """The generator's CPU and the statistics delta of the run; once per run."""
        if not self.started or self.finished:
            return
        self.finished = True
        self.stopped_at = time.time()
        if self.update is not None:
            self.update.stop()
        if self.scraper is not None:
            self.scraper.stop()
        if self.monitor is not None:
            self.cpu_percent = self.monitor.stop()
            self.cpu_warning = self.cpu_warning or self.monitor.cpu_warning
            self.monitor = None
        self.settle_reports()
        options = self.environment.parsed_options
        if options is not None and not options.headless and self.reports:
            print("\n".join(r.text() for r in self.reports), flush=True)

    def settle_reports(self) -> None:
        """The server's statistics over the run, settled on the client's counts. Workers send
        their last requests with their final reports, after the test stopped: when those
        changed the counts, read the server again."""
        if self.tracker is None:
            return
        counts, avg = client_view(self.environment)
        if self.reports and counts == self.client_counts:
            return
        self.client_counts = counts
        self.reports = self.tracker.finish(counts, avg)
        for error in self.tracker.errors:
            log.warning("pytest-triton: %s", error)

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.close()
        self.stop_server()


def client_view(environment: Environment) -> tuple[dict[str, int], dict[str, float]]:
    """Successful requests and average latency per request name (= model name)."""
    counts: dict[str, int] = {}
    avg: dict[str, float] = {}
    for (name, _method), entry in environment.stats.entries.items():
        ok = entry.num_requests - entry.num_failures
        previous = counts.get(name, 0)
        counts[name] = previous + ok
        if entry.num_requests:
            weight = previous + entry.num_requests
            avg[name] = (
                avg.get(name, 0.0) * previous + entry.avg_response_time * entry.num_requests
            ) / weight
    return counts, avg


RUN = StateKey[LoadRun]("load run")
