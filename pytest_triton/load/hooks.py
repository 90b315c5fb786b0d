"""Targets, server report, embedded server and traffic bounds, wired into Locust's events.

Imported by `users` (so a locustfile that defines a TritonUser gets all of it). Listeners run
in every Locust process; the master (or the single local process) starts the embedded server,
judges the targets and owns the exit code, workers only send load.
"""

from __future__ import annotations

import atexit
import json
import logging
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import gevent.lock
import psutil
from locust import events
from locust import log as locust_log
from locust.env import Environment
from locust.runners import MasterRunner, Runner, WorkerRunner

from ..errors import ConfigError, TritonTestError
from ..repository.spec import FORMATS
from . import targets as tg
from .embedded import EmbeddedModel, EmbeddedServer, check_host, encode_endpoints
from .server_report import ModelReport, StatsTracker, generator_warnings
from .settings import RunSettings, option_float, stats_protocol, user_endpoint, user_model

log = logging.getLogger("pytest_triton.load")
DEFAULT_RUN_TIME_S = 30
MONITOR_PERIOD_S = 0.25


@dataclass
class _Run:
    """What the master (or local) process knows about the current run."""

    defaults: tg.Targets = field(default_factory=lambda: tg.Targets(perf_fail_ratio=0.0))
    server: EmbeddedServer | None = None
    tracker: StatsTracker | None = None
    started: bool = False
    finished: bool = False
    cpu_start: tuple[float, float] | None = None
    cpu_samples: list[float] = field(default_factory=list)
    cpu_percent: float | None = None
    cpu_warning: bool = False
    reports: list[ModelReport] = field(default_factory=list)
    monitor: gevent.Greenlet | None = None
    summary: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    report_json: str | None = None
    printed: bool = False
    embedded_host: str | None = None


_RUN = _Run()


def default_targets(**limits: float | None) -> None:
    """A locustfile's own targets; --perf-* flags and TRITON_PERF_* variables override them.

    The built-in default is perf_fail_ratio=0 (no failed request allowed).
    """
    _RUN.defaults = _RUN.defaults.merged(limits)


# -- options -------------------------------------------------------------------------------
@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    for t in tg.TARGET_DEFS:
        unit = f" ({t.unit})" if t.unit else ""
        parser.add_argument(t.cli, dest=t.dest, type=float, default=None, env_var=t.env,
                            metavar="X", help=f"target: {t.help}{unit} [env {t.env}]")
    parser.add_argument("--triton-protocol", choices=("http", "grpc"), default=None,
                        env_var="TRITON_PROTOCOL",
                        help="protocol for the embedded server (default http); with --host the "
                             "URL's scheme (http:// or grpc://) decides")
    parser.add_argument("--triton-batch-size", type=int, default=None,
                        env_var="TRITON_BATCH_SIZE", metavar="N",
                        help="samples per request (default: the user class's batch_size)")
    parser.add_argument("--triton-model", default=None, env_var="TRITON_MODEL", metavar="NAME",
                        help="Triton model name to load (default: the locustfile's model)")
    parser.add_argument("--triton-format", choices=FORMATS, default=None,
                        env_var="TRITON_FORMAT",
                        help="export format the embedded server serves (default onnx)")
    parser.add_argument("--triton-max-requests", type=int, default=None,
                        env_var="TRITON_MAX_REQUESTS", metavar="N",
                        help="stop after about N requests (distributed: within one stats "
                             "report interval)")
    parser.add_argument("--triton-allow-remote", action="store_true", default=False,
                        env_var="TRITON_ALLOW_REMOTE",
                        help="allow load on a non-loopback --host (refused by default)")
    parser.add_argument("--triton-report-json", default=None, env_var="TRITON_REPORT_JSON",
                        metavar="PATH", include_in_web_ui=False,
                        help="also write the verdict and server report to this JSON file")
    parser.add_argument("--triton-executable", default=None, env_var="TRITON_EXECUTABLE",
                        metavar="PATH", include_in_web_ui=False,
                        help="tritonserver binary for the embedded server (default: PATH, "
                             "then the one bundled in nvidia-pytriton)")
    # Set by the master for its workers (they receive the master's options with each spawn).
    parser.add_argument("--triton-endpoints", default=None, include_in_web_ui=False,
                        help="(internal) the embedded server's endpoints")


def _settings(environment: Environment) -> RunSettings:
    return RunSettings.from_options(environment.parsed_options)


def _targets(environment: Environment) -> tg.Targets:
    options = environment.parsed_options
    try:
        return _RUN.defaults.merged({t.name: option_float(getattr(options, t.dest, None), t.cli)
                                     for t in tg.TARGET_DEFS})
    except ValueError as exc:  # ConfigError is one
        raise ConfigError(str(exc)) from None


def _fatal(message: str, code: int = 2) -> None:
    """A configuration error before any load: one clear line, no traceback, nothing left."""
    log.error(message)
    _stop_server()
    sys.exit(code)


def _user_hosts(environment: Environment) -> set[str]:
    return {str(c.host) for c in environment.user_classes if getattr(c, "host", None)}


def _current_host(environment: Environment) -> str | None:
    if environment.host:
        return environment.host
    hosts = _user_hosts(environment)
    return next(iter(hosts)) if len(hosts) == 1 else None


# -- init: bounds, hosts, embedded server ------------------------------------------------------
@events.init.add_listener
def _on_init(environment: Environment, runner: Runner | None = None, **_: Any) -> None:
    try:
        _prepare(environment, runner)
    finally:
        _sync_loop_clock()


def _sync_loop_clock() -> None:
    """Bring the gevent loop's cached clock up to date before Locust arms its --run-time timer.

    libev measures a timer from the time of the loop's last iteration, and the loop does not
    iterate while a process imports torch or exports models: without this, `-t 4s` after a
    3-second start stops the run 1 s after it began (and Locust's CSV, written once a second,
    can miss every request).
    """
    gevent.get_hub().loop.update_now()


def _prepare(environment: Environment, runner: Runner | None) -> None:
    options = environment.parsed_options
    if options is None or isinstance(runner, WorkerRunner):
        return  # library use, or a worker: the master decides and sends its options
    try:
        settings = _settings(environment)
        _targets(environment)  # a bad target fails now, not after the run
    except (ConfigError, ValueError) as exc:
        _fatal(f"pytest-triton: {exc}")
        return
    _RUN.report_json = getattr(options, "triton_report_json", None)
    if options.headless and not options.run_time:
        options.run_time = DEFAULT_RUN_TIME_S
        log.info("pytest-triton: no --run-time given: the test stops after %ss (pass -t to "
                 "change it)", DEFAULT_RUN_TIME_S)
    host = _current_host(environment)
    if host:
        try:
            check_host(host, settings.allow_remote)
        except ConfigError as exc:
            _fatal(f"pytest-triton: {exc}")
        return
    if len(_user_hosts(environment)) > 1:
        return  # several explicit class hosts: each is checked when its users start
    _start_embedded(environment, settings)


def _served_models(classes: Iterable[Any]) -> list[EmbeddedModel]:
    served: list[EmbeddedModel] = []
    for cls in classes:
        model = getattr(cls, "served", None)
        if model is None:
            raise ConfigError(f"no --host given and {cls.__name__} serves no model itself "
                              "(set its `served` attribute, or pass --host URL)")
        if model not in served:
            served.append(model)
    return served


def _start_embedded(environment: Environment, settings: RunSettings) -> None:
    options = environment.parsed_options
    assert options is not None  # checked by the caller
    try:
        models = _served_models(environment.user_classes)
        server = EmbeddedServer(models, settings.fmt,
                                executable=getattr(options, "triton_executable", None))
        _RUN.server = server
        log.info("pytest-triton: no --host given: starting an embedded tritonserver for %s",
                 ", ".join(server.model_names()))
        started = time.monotonic()
        endpoints = server.start()
    except (TritonTestError, OSError) as exc:
        _fatal(f"pytest-triton: the embedded server could not start: {exc}")
        return
    protocol = settings.protocol or "http"
    environment.host = _RUN.embedded_host = f"{protocol}://{endpoints.url(protocol)}"
    options.host = environment.host
    options.triton_endpoints = encode_endpoints(endpoints)
    log.info("pytest-triton: embedded server ready in %.1fs at http://%s and grpc://%s; "
             "load goes to %s", time.monotonic() - started, endpoints.http, endpoints.grpc,
             environment.host)


_STOP_LOCK = gevent.lock.Semaphore()


def _stop_server() -> None:
    """Idempotent, and a second caller waits for the first: on SIGTERM Locust runs its shutdown
    twice, and the process must not exit while the server is still being stopped."""
    with _STOP_LOCK:
        server = _RUN.server
        if server is not None:
            server.stop()
            _RUN.server = None


atexit.register(_stop_server)


# -- a run: baseline, monitor, server report ----------------------------------------------
@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if environment.parsed_options is None or isinstance(runner, WorkerRunner):
        return
    _RUN.started, _RUN.finished = True, False
    _RUN.reports, _RUN.cpu_samples, _RUN.cpu_percent, _RUN.cpu_warning = [], [], None, False
    _RUN.result, _RUN.summary, _RUN.printed = {}, "", False
    if not environment.host and _RUN.embedded_host:
        environment.host = _RUN.embedded_host  # the web UI's host field was cleared
    host = _current_host(environment)
    if host is None:
        return
    try:
        settings = _settings(environment)
        check_host(host, settings.allow_remote)
        _targets(environment)
        models = [user_model(c, settings) for c in environment.user_classes]
    except ConfigError as exc:
        log.error("pytest-triton: %s", exc)
        environment.process_exit_code = 2
        gevent.spawn(_end_run, environment, "the run's settings were refused")
        return
    protocol = stats_protocol(host, settings)
    if _RUN.tracker is not None:
        _RUN.tracker.close()
    _RUN.tracker = StatsTracker(user_endpoint(protocol, host, settings), protocol, models)
    _RUN.tracker.start()
    for error in _RUN.tracker.errors:
        log.warning("pytest-triton: %s", error)
    times = psutil.Process().cpu_times()
    _RUN.cpu_start = (times.user + times.system, time.monotonic())
    _RUN.monitor = gevent.spawn(_monitor, environment, settings.max_requests)


def _end_run(environment: Environment, reason: str) -> None:
    """Stop the run as -t does: quit when headless, stop (keep the UI) otherwise."""
    runner = environment.runner
    if runner is None:
        return
    log.info("pytest-triton: %s, stopping the test", reason)
    options = environment.parsed_options
    if options is not None and options.headless:
        runner.quit()
    else:
        runner.stop()


def _monitor(environment: Environment, max_requests: int | None) -> None:
    """Bounds the traffic (--triton-max-requests) and samples the workers' CPU."""
    runner = environment.runner
    while True:
        gevent.sleep(MONITOR_PERIOD_S)
        if isinstance(runner, MasterRunner):
            usage = [w.cpu_usage for w in runner.clients.values()]
            if usage:
                _RUN.cpu_samples.append(max(usage))
        if max_requests and environment.stats.total.num_requests >= max_requests:
            # Not from this greenlet: stopping the run kills it.
            gevent.spawn(_end_run, environment, f"--triton-max-requests {max_requests} reached")
            return


@events.cpu_warning.add_listener
def _on_cpu_warning(**_: Any) -> None:
    _RUN.cpu_warning = True


def _client_view(environment: Environment) -> tuple[dict[str, int], dict[str, float]]:
    """Successful requests and average latency per request name (= model name)."""
    counts: dict[str, int] = {}
    avg: dict[str, float] = {}
    for (name, _method), entry in environment.stats.entries.items():
        ok = entry.num_requests - entry.num_failures
        previous = counts.get(name, 0)
        counts[name] = previous + ok
        if entry.num_requests:
            weight = previous + entry.num_requests
            avg[name] = (avg.get(name, 0.0) * previous + entry.avg_response_time
                         * entry.num_requests) / weight
    return counts, avg


def _finish_run(environment: Environment) -> None:
    if not _RUN.started or _RUN.finished:
        return
    _RUN.finished = True
    if _RUN.monitor is not None:
        if _RUN.monitor is not gevent.getcurrent():
            _RUN.monitor.kill(block=False)
        _RUN.monitor = None
    runner = environment.runner
    if _RUN.cpu_start is not None:
        times = psutil.Process().cpu_times()
        cpu, wall = times.user + times.system, time.monotonic()
        if wall > _RUN.cpu_start[1] and not isinstance(runner, MasterRunner):
            _RUN.cpu_percent = 100 * (cpu - _RUN.cpu_start[0]) / (wall - _RUN.cpu_start[1])
    if isinstance(runner, MasterRunner):
        if _RUN.cpu_samples:
            _RUN.cpu_percent = sum(_RUN.cpu_samples) / len(_RUN.cpu_samples)
        _RUN.cpu_warning = _RUN.cpu_warning or runner.worker_cpu_warning_emitted
    if _RUN.tracker is not None:
        counts, avg = _client_view(environment)
        _RUN.reports = _RUN.tracker.finish(counts, avg)
        for error in _RUN.tracker.errors:
            log.warning("pytest-triton: %s", error)
    options = environment.parsed_options
    if options is not None and not options.headless and _RUN.reports:
        print("\n".join(r.text() for r in _RUN.reports), flush=True)


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    if environment.parsed_options is None or isinstance(environment.runner, WorkerRunner):
        return
    _finish_run(environment)


# -- the end: verdict, exit code, report ----------------------------------------------------
def measured(environment: Environment) -> tg.Measured:
    """The run's client-side figures from Locust's (aggregated) statistics."""
    total = environment.stats.total
    duration = 0.0
    if total.last_request_timestamp and total.start_time:
        duration = max(total.last_request_timestamp - total.start_time, 1e-9)
    nan = float("nan")
    any_ = total.num_requests > 0
    return tg.Measured(
        requests=total.num_requests,
        failures=total.num_failures,
        samples=total.total_content_length,
        duration_s=duration,
        avg_ms=total.avg_response_time if any_ else nan,
        p95_ms=total.get_response_time_percentile(0.95) if any_ else nan,
        p99_ms=total.get_response_time_percentile(0.99) if any_ else nan,
    )


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    runner = environment.runner
    if environment.parsed_options is None or isinstance(runner, WorkerRunner):
        return
    if not _RUN.started:
        _RUN.summary = "pytest-triton: no test ran, nothing to judge"
        return
    if _RUN.result:  # Locust shuts down twice on SIGTERM: judge once
        _set_exit_code(environment, not _RUN.result["passed"])
        return
    _finish_run(environment)
    figures = measured(environment)
    try:
        targets = _targets(environment)
    except ConfigError as exc:
        log.error("pytest-triton: %s", exc)
        _RUN.summary = f"pytest-triton: cannot judge the run: {exc}"
        environment.process_exit_code = 2
        return
    checks = tg.evaluate(targets, figures)
    failed = tg.failures(checks)
    warnings = generator_warnings(cpu_percent=_RUN.cpu_percent, cpu_warning=_RUN.cpu_warning,
                                  reports=_RUN.reports)
    parts = [
        f"Client: {figures.requests} requests ({figures.failures} failed) in "
        f"{figures.duration_s:.1f}s: {figures.request_rate:.1f} req/s, "
        f"{figures.throughput:.1f} samples/s",
        *(r.text() for r in _RUN.reports),
        *warnings,
        tg.verdict_table(checks, "Verdict (pytest-triton targets)"),
    ]
    _RUN.summary = "\n\n".join(parts)
    _RUN.result = {
        "host": _current_host(environment),
        "passed": not failed,
        "checks": [vars(c) for c in checks],
        "measured": {**vars(figures), "throughput": figures.throughput,
                     "request_rate": figures.request_rate, "fail_ratio": figures.fail_ratio},
        "server": [r.as_dict() for r in _RUN.reports],
        "generator_cpu_percent": _RUN.cpu_percent,
        "warnings": warnings,
    }
    _set_exit_code(environment, bool(failed))


def _set_exit_code(environment: Environment, failed: bool) -> None:
    if environment.process_exit_code is not None and environment.process_exit_code > 1:
        return  # a refused host or a setup error already decided
    runner = environment.runner
    if failed:
        environment.process_exit_code = 1
    elif not (locust_log.unhandled_greenlet_exception or (runner and runner.exceptions)):
        environment.process_exit_code = 0  # the targets, not locust's any-error rule, decide


@events.quit.add_listener
def _on_quit(exit_code: int, **_: Any) -> None:
    """After Locust's own tables: the server report and the verdict, then stop the server."""
    try:
        if _RUN.summary and not _RUN.printed:
            _RUN.printed = True
            print("\n" + _RUN.summary + "\n", flush=True)
        if _RUN.report_json and _RUN.result:
            path = Path(_RUN.report_json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**_RUN.result, "exit_code": exit_code}, indent=2,
                                       default=str))
    finally:
        if _RUN.tracker is not None:
            _RUN.tracker.close()
        _stop_server()
