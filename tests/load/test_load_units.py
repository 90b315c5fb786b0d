"""The load package's pure parts: targets and verdict, host rules, options, reports, the search.

No server and no locust here (these modules must stay importable without gevent patching).
"""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_sources import from_arguments, from_environ
from pytest_triton.base.urls import Endpoints, check_host, is_loopback
from pytest_triton.client.stats import Duration, ModelStats
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.server_side import ModelReport, generator_warnings
from pytest_triton.load.perf.points import (
    Point,
    bound_search,
    bound_summary,
    largest_within_bound,
    parse_range,
)
from pytest_triton.load.perf.report import plot, points_markdown, write_points_csv
from pytest_triton.load.runner.embedded import EmbeddedModel
from pytest_triton.load.runner.user_settings import (
    stats_protocol,
    user_batch_size,
    user_endpoint,
    user_model,
    user_protocol,
)
from tests.helpers.locust_runs import REPO, subprocess_env
from tests.helpers.probe_models import probe_spec


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter of the suite's environment, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
    )


def test_nothing_here_imports_locust() -> None:
    """The plugin and every module pytest may import must leave gevent out of the process."""
    code = (
        "import sys, pytest_triton.plugin, pytest_triton.load.measure.targets, "
        "pytest_triton.load.perf.points, pytest_triton.load.runner.embedded, "
        "pytest_triton.load.runner.user_settings, pytest_triton.load.runner.options, "
        "pytest_triton.load.perf.report, "
        "pytest_triton.load.measure.server_side, pytest_triton.load.perf.command, "
        "pytest_triton.load.webui.snapshot, pytest_triton.load.measure.window_log, "
        "pytest_triton.load.measure.windows, pytest_triton.load.measure.arrivals, "
        "pytest_triton.load.runner.generator_cpu, pytest_triton.load.tune.tuner; "
        "from gevent import monkey; "
        "assert 'locust' not in sys.modules and not monkey.is_anything_patched()"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr


LOOP_CLOCK = """
import time
import gevent
from pytest_triton.load.runner.listeners import _sync_loop_clock  # imports locust

def run_time_timer_after_a_slow_start(sync):
    busy = time.monotonic()
    while time.monotonic() - busy < 1.5:  # the locustfile's imports: the loop does not run
        pass
    if sync:
        _sync_loop_clock()
    armed = time.monotonic()
    gevent.spawn_later(1.0, lambda: None).join()  # how Locust arms --run-time
    return time.monotonic() - armed

stale = run_time_timer_after_a_slow_start(False)
gevent.sleep(0.01)
print(stale, run_time_timer_after_a_slow_start(True))
"""


def test_run_time_counts_from_the_start_of_the_load() -> None:
    """The cause of the flaky 0-request CSV: libev measures a timer from the loop's cached
    clock, which stands still while the process works without yielding (imports, exports),
    so Locust's -t timer fired early by that long. hooks syncs the clock after init."""
    done = run_python(LOOP_CLOCK)
    assert done.returncode == 0, done.stderr
    stale, synced = map(float, done.stdout.split())
    assert stale < 0.5, f"gevent's timers no longer start from a stale clock ({stale:.2f}s)"
    assert 0.95 < synced < 1.5, synced


TWO_RUNS = """
import logging
from locust.env import Environment
from locust.exception import StopUser
from pytest_triton.load.runner.multiplexer import multiplexer
from pytest_triton.load.runner.run_state import run_state
from pytest_triton.load.runner.user_start import USER_NUMBERS
from pytest_triton.load.runner.sequence_ids import id_source
from pytest_triton.load.users import TritonUser

said = []
logging.getLogger("pytest_triton.load").addHandler(
    type("H", (logging.Handler,), {"emit": lambda self, r: said.append(r.getMessage())})()
)

class NoHost(TritonUser):
    pass

first, second = Environment(user_classes=[NoHost]), Environment(user_classes=[NoHost])
for environment, users in ((first, 2), (second, 1)):
    for _ in range(users):
        try:
            NoHost(environment).on_start()
        except StopUser:
            pass
numbers = [dict(run_state(e).get(USER_NUMBERS)) for e in (first, second)]
print(len(said), *numbers)
print(multiplexer(first) is multiplexer(first), multiplexer(first) is multiplexer(second))
ids = [id_source((5, 9), e).take() for e in (first, first, second)]
print(ids)
"""


def test_two_runs_in_one_process_keep_their_own_state() -> None:
    """Two Locust Environments in one process: each numbers its own users, says its own
    refusal once, has its own multiplexer and hands out its own sequence ids (module-level
    registries shared them all)."""
    done = run_python(TWO_RUNS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "2 {'triton': 2} {'triton': 1}",
        "True False",
        "[5, 6, 5]",
    ]


# -- targets ----------------------------------------------------------------------------------
def measured(**overrides: float) -> tg.Measured:
    values: dict[str, float] = dict(
        requests=1000,
        failures=0,
        samples=2000,
        duration_s=10.0,
        avg_ms=4.0,
        p95_ms=8.0,
        p99_ms=12.0,
    )
    values.update(overrides)
    return tg.Measured(**values)  # type: ignore[arg-type]


def test_throughput_counts_samples_not_requests() -> None:
    m = measured()
    assert m.throughput == 200.0 and m.request_rate == 100.0 and m.fail_ratio == 0.0


def test_verdict_passes_and_fails_per_target() -> None:
    targets = tg.Targets(perf_latency_p99=10, perf_throughput=150, perf_fail_ratio=0.0)
    checks = {c.name: c for c in tg.evaluate(targets, measured())}
    assert checks["perf_latency_p99"].passed is False
    assert checks["perf_throughput"].passed is True
    assert checks["perf_fail_ratio"].passed is True
    assert checks["perf_latency_p95"].passed is None  # no target, still reported
    table = tg.verdict_table(list(checks.values()))
    assert "RESULT: FAIL - perf_latency_p99 (ms) measured 12, target <= 10" in table
    assert "perf_throughput (samples/s)  >= 150" in table


def test_a_run_without_success_fails_every_target() -> None:
    checks = tg.evaluate(tg.Targets(perf_throughput=1), measured(requests=5, failures=5, samples=0))
    failed = {c.name for c in tg.failures(checks)}
    assert failed == {"successful requests", "perf_throughput"}
    assert "perf_throughput (samples/s) not measured" in tg.verdict_table(checks)


def test_targets_from_env_and_overrides() -> None:
    env = {"TRITON_PERF_LATENCY_P99": "50", "TRITON_PERF_THROUGHPUT": " 1e3 "}
    targets = tg.Targets.from_config(resolve(from_environ(env, "perf")))
    assert targets.perf_latency_p99 == 50 and targets.perf_throughput == 1000
    merged = tg.Targets(perf_fail_ratio=0.0).merged(
        {"perf_latency_p99": 20, "perf_throughput": None}
    )
    assert merged == tg.Targets(perf_latency_p99=20, perf_fail_ratio=0.0)
    with pytest.raises(
        ValueError, match="TRITON_PERF_LATENCY_P95: expected a number >= 0, got 'fast'"
    ):
        resolve(from_environ({"TRITON_PERF_LATENCY_P95": "fast"}, "perf"))
    with pytest.raises(ValueError, match=r"ratio in 0\.\.1"):
        tg.Targets(perf_fail_ratio=2)
    assert [t.cli for t in tg.TARGET_DEFS][2:4] == ["--perf-latency-p99", "--perf-throughput"]


# -- hosts and options ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "grpc://localhost:8001", "127.0.0.2:1", "http://[::1]:8000"]
)
def test_loopback_hosts_are_allowed(url: str) -> None:
    assert is_loopback(url)
    check_host(url)


@pytest.mark.parametrize(
    "url", ["http://10.0.0.5:8000", "grpc://triton.internal:8001", "http://0.0.0.0:8000"]
)
def test_other_hosts_need_the_opt_in(url: str) -> None:
    with pytest.raises(ConfigError, match="--triton-allow-remote"):
        check_host(url)
    check_host(url, allow_remote=True)


def test_malformed_host_says_the_format() -> None:
    with pytest.raises(ConfigError, match="http://HOST:PORT"):
        check_host("http://nohostport")


def test_endpoints_travel_as_one_option() -> None:
    endpoints = Endpoints("127.0.0.1:1000", "127.0.0.1:2000")
    assert Endpoints.decode(endpoints.encode()) == endpoints


def locust_options(**values: object) -> object:
    return resolve(from_arguments(SimpleNamespace(**values), "locust"))


def test_web_ui_strings_and_cli_values_give_the_same_settings() -> None:
    cli = dict(
        triton_batch_size=4,
        triton_max_requests=None,
        triton_protocol="grpc",
        triton_model=None,
        triton_format=None,
        triton_allow_remote=True,
        triton_endpoints=None,
    )
    web = dict(
        triton_batch_size="4",
        triton_max_requests="",
        triton_protocol="grpc",
        triton_model="",
        triton_format="",
        triton_allow_remote="true",
        triton_endpoints="",
    )
    assert locust_options(**cli) == locust_options(**web)
    with pytest.raises(
        ConfigError,
        match=r"--triton-batch-size \(or TRITON_BATCH_SIZE\): "
        "expected an integer >= 1, got '0'",
    ):
        locust_options(triton_batch_size="0")


def test_user_resolution() -> None:
    served = EmbeddedModel(probe_spec)

    class User:
        model = None
        batch_size = 2
        protocol = None

    User.served = served  # type: ignore[attr-defined]
    plain = resolve()
    assert user_model(User, plain) == "probe_onnx"
    assert user_model(User, resolve(format="torchscript-trace")) == "probe_torchscript_trace"
    assert user_model(User, resolve(model="other")) == "other"
    assert user_batch_size(User, plain) == 2
    assert user_batch_size(User, resolve(batch_size=16)) == 16
    assert user_protocol(User, "grpc://127.0.0.1:9", plain) == "grpc"
    assert user_protocol(User, "127.0.0.1:9", plain) == "http"
    # --triton-protocol with two protocols: users take them in turn
    both = resolve(protocol="http,grpc")
    assert [user_protocol(User, "http://127.0.0.1:9", both, i) for i in range(3)] == [
        "http",
        "grpc",
        "http",
    ]
    # The embedded server's own ports win over Triton's HTTP+1 = gRPC convention ...
    known = resolve(endpoints=Endpoints("127.0.0.1:5000", "127.0.0.1:7000").encode())
    assert user_endpoint("grpc", "http://127.0.0.1:5000", known) == "127.0.0.1:7000"
    assert stats_protocol("grpc://127.0.0.1:7000", known) == "http"
    # ... but only for the embedded server's host.
    assert user_endpoint("grpc", "http://127.0.0.1:8000", known) == "127.0.0.1:8001"
    assert stats_protocol("grpc://127.0.0.1:8001", known) == "grpc"


# -- server report ----------------------------------------------------------------------------
def test_server_report_reads_like_perf_analyzer() -> None:
    delta = ModelStats(
        inference_count=400,
        execution_count=50,
        success=Duration(200, 200 * 6_000_000),
        queue=Duration(200, 200 * 3_000_000),
        compute_input=Duration(50, 50 * 100_000),
        compute_infer=Duration(50, 50 * 2_000_000),
        compute_output=Duration(50, 50 * 50_000),
        batches={8: 50},
    )
    report = ModelReport("m", delta, client_requests=200, client_avg_ms=7.5)
    text = report.text()
    assert "Inference count: 400" in text and "Execution count: 50" in text
    assert "Successful request count: 200" in text and "Avg batch size: 8.00" in text
    assert "Batch size histogram (batch size x executions): 8 x 50" in text
    assert "Avg request latency: 6000 usec (overhead 850 usec + queue 3000 usec" in text
    assert report.client_overhead_ms == pytest.approx(1.5)
    assert generator_warnings(reports=[report]) == []
    slow_client = ModelReport("m", delta, 200, client_avg_ms=20.0)
    assert "spent outside the server" in generator_warnings(reports=[slow_client])[0]
    assert "could not keep up" in generator_warnings(cpu_percent=97.0)[0]


def test_server_report_names_the_requests_in_flight_at_stop() -> None:
    """A distributed run's client count and the server's differ by the requests in flight
    when Locust stopped its users: the report says how many, and why."""
    delta = ModelStats(
        inference_count=771, execution_count=771, success=Duration(771, 771 * 1_000_000)
    )
    report = ModelReport("m", delta, client_requests=763)
    assert report.in_flight_at_stop == 8 and report.as_dict()["in_flight_at_stop"] == 8
    assert (
        "the client counted 763 successful requests, the server 771: 8 in flight when the "
        "users stopped" in report.text()
    )
    same = ModelReport("m", delta, client_requests=771)
    assert same.in_flight_at_stop == 0 and "Client and server counts" not in same.text()
    assert "the server only 771: 9" in ModelReport("m", delta, client_requests=780).text()
    assert ModelReport("m", delta).in_flight_at_stop is None


# -- perf sweep -------------------------------------------------------------------------------
def point(concurrency: int, p99: float, batch: int = 1, failures: int = 0) -> Point:
    return Point(
        batch_size=batch,
        concurrency=concurrency,
        duration_s=2.0,
        requests=100,
        failures=failures,
        avg_ms=p99 / 2,
        p50_ms=p99 / 2,
        p90_ms=p99 * 0.9,
        p95_ms=p99 * 0.95,
        p99_ms=p99,
    )


@pytest.mark.parametrize(
    "text, values",
    [
        ("2:16:2", [2, 4, 6, 8, 10, 12, 14, 16]),
        ("1:4", [1, 2, 3, 4]),
        ("8", [8]),
        ("1,2,4", [1, 2, 4]),
    ],
)
def test_ranges_read_like_perf_analyzer(text: str, values: list[int]) -> None:
    assert parse_range(text) == values


@pytest.mark.parametrize("text", ["8:2", "0:4", "a", "1:2:0", "1:2:3:4"])
def test_bad_ranges_say_the_format(text: str) -> None:
    with pytest.raises(ValueError, match="START"):
        parse_range(text)


def test_bound_search_doubles_then_bisects() -> None:
    asked: list[int] = []

    def measure(c: int) -> Point:
        asked.append(c)
        return point(c, 20.0 * c)  # p99 grows 20 ms per concurrent request

    points = list(bound_search(measure, 90, 1, 64))
    assert asked == [1, 2, 4, 8, 6, 5]
    best = largest_within_bound(points, 90)
    assert best is not None and best.concurrency == 4
    assert list(bound_search(measure, 10, 1, 64)) == [point(1, 20.0)]  # never within
    assert [p.concurrency for p in bound_search(measure, 1e9, 1, 6)] == [1, 2, 4, 6]


def test_failed_points_never_count_as_within_the_bound() -> None:
    best = largest_within_bound([point(1, 5), point(2, 5, failures=3)], 10)
    assert best is not None and best.concurrency == 1
    summary = bound_summary(best, 10, 99, "rec/s")
    assert summary.startswith("p99 latency bound 10 ms: up to 1 concurrent requests of batch 1")
    assert "not met" in bound_summary(None, 10, 99, "rec/s")


PERF_ANALYZER_HEADER = [  # perf_analyzer 2.51's `-f file.csv`, server statistics on
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
]


def test_reports_are_written(tmp_path: Path) -> None:
    points = [point(1, 10.0, batch=8), point(1, 30.0, batch=64)]
    table = points_markdown(points, "rec/s")
    assert table.splitlines()[0] == (
        "| **Batch Size** | **Throughput** | **Avg Latency** | **95% Latency** | **99% Latency** |"
    )
    assert "| 64 | 3200.0 rec/s | 15.0 ms | 28.5 ms | 30.0 ms |" in table
    fast = replace(points[0], avg_ms=2.1374, p95_ms=2.6, p99_ms=3.0)
    assert "| 2.14 ms | 2.60 ms | 3.00 ms |" in points_markdown([fast])
    write_points_csv(points, tmp_path / "p.csv")
    with open(tmp_path / "p.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:13] == ["Concurrency", *PERF_ANALYZER_HEADER]
    assert list(rows[0])[13] == "Avg latency"  # ours follow perf_analyzer's
    assert rows[1]["Inferences/Second"] == "3200.0"
    assert [rows[1][f"p{p} latency"] for p in (50, 90, 95, 99)] == [
        "15000",
        "27000",
        "28500",
        "30000",
    ]
    assert rows[1]["Client Send"] == rows[1]["Client Recv"] == "0"
    assert rows[1]["Network+Server Send/Recv"] == "15000"  # no server time known: all of it
    open_loop = [replace(points[0], request_rate_asked=50.0)]
    write_points_csv(open_loop, tmp_path / "r.csv")
    header = (tmp_path / "r.csv").read_text().splitlines()[0].split(",")
    assert header[:13] == ["Request Rate", *PERF_ANALYZER_HEADER] and "Concurrency" in header
    plot(points, tmp_path / "p.png", title="t", unit="rec/s", bound_ms=20)
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert math.isnan(points[0].client_overhead_ms)  # no server figures, no overhead
