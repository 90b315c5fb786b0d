"""The web tab's pure parts: sample counting across processes, the tab's rows, the samples CSV,
response sizes in bytes, and the web UI's bind rule (no locust imported here)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pytest_triton.client.stats import Duration, ModelStats
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.window_log import WindowLog
from pytest_triton.load.runner.generator_cpu import REPORT_KEY as CPU_KEY
from pytest_triton.load.runner.generator_cpu import GeneratorCpu
from pytest_triton.load.runner.options import WEB_HOST, web_ui_exposure
from pytest_triton.load.webui.snapshot import (
    AGGREGATED,
    CSV_HEADER,
    ModelFigures,
    Snapshot,
    StreamsNow,
    as_json,
    chart_point,
    csv_rows,
    tab_rows,
)
from tests.helpers.locust_runs import REPO, subprocess_env


# -- samples ---------------------------------------------------------------------------------
def test_samples_count_batch_sizes_of_successful_requests_only() -> None:
    log = WindowLog()
    log.on_request(name="m", response_time=3.0, context={"batch_size": 8})
    log.on_request(
        name="m", response_time=3.0, context={"batch_size": 8}, exception=RuntimeError("refused")
    )
    log.on_request(name="other", response_time=3.0, context={"batch_size": 2})
    log.on_request(name="m", response_time=3.0, context={})  # not our users: no samples
    assert log.samples("m") == 8 and log.samples("other") == 2 and log.samples() == 10
    assert log.names() == ["m", "other"]


def test_current_samples_rate_uses_locusts_current_rps_window() -> None:
    """Locust's current_rps averages the seconds [last-12, last-2): so does ours."""
    log = WindowLog()
    for second in range(100, 120):
        log.record(second + 0.5, "m", 1.0, True, 64 * (second - 99))
    expected = np.mean([64 * (s - 99) for s in range(107, 117)])
    assert log.current_rate("m", 100.0, 119.5) == expected
    assert log.current_rate("m", 100.0, None) == 0.0
    assert log.current_rate("unknown", 100.0, 119.5) == 0.0


def test_workers_hand_their_samples_to_the_master() -> None:
    """Each worker's report carries what it logged since the last one; the master's totals
    equal one process logging everything."""
    workers = [WindowLog(), WindowLog()]
    master, alone = WindowLog(), WindowLog()
    for i, worker in enumerate(workers):
        for second in (10, 11):
            worker.record(second, "m", 1.0, True, 4 + i)
            alone.record(second, "m", 1.0, True, 4 + i)
    for worker in workers:
        data: dict[str, object] = {}
        worker.on_report_to_master(client_id="w", data=data)
        assert worker.samples() == 0  # sent: counted once only
        master.on_worker_report(client_id="w", data=data)
    master.on_worker_report(client_id="w", data={})  # a report without our key
    assert master.samples("m") == alone.samples("m") == 18
    assert master.sample_rate("m", 10, 12) == alone.sample_rate("m", 10, 12) == 9.0


def test_workers_report_their_cpu_to_the_master() -> None:
    """Every stats report carries the worker's CPU since its previous report; the master
    keeps each worker's latest and warns on the busiest."""
    worker, master = GeneratorCpu(), GeneratorCpu()
    data: dict[str, object] = {}
    worker.on_report_to_master(client_id="w1", data=data)
    assert isinstance(data[CPU_KEY], float) and data[CPU_KEY] >= 0  # type: ignore[operator]
    master.on_worker_report(client_id="w1", data={CPU_KEY: 35.0})
    master.on_worker_report(client_id="w2", data={CPU_KEY: 95.5})
    master.on_worker_report(client_id="w1", data={CPU_KEY: 40.0})
    master.on_worker_report(client_id="w3", data={})  # a worker without pytest-triton
    assert master.workers == {"w1": 40.0, "w2": 95.5} and master.busiest_worker() == 95.5
    master.reset()
    assert master.busiest_worker() is None


# -- the tab, the CSV, the charts' JSON ----------------------------------------------------------
def server_delta() -> ModelStats:
    return ModelStats(
        inference_count=80,
        execution_count=12,
        success=Duration(40, 40 * 9000_000),
        queue=Duration(40, 40 * 5000_000),
        compute_input=Duration(12, 12 * 100_000),
        compute_infer=Duration(12, 12 * 3000_000),
        compute_output=Duration(12, 12 * 200_000),
        batches={2: 4, 8: 8},
    )


def snapshot(final: bool = False, cpu: float = 40.0) -> Snapshot:
    model = ModelFigures(
        "dlrm_onnx",
        requests=42,
        failures=2,
        samples=80,
        request_rate=4.0,
        sample_rate=8.0,
        avg_ms=12.0,
        p50_ms=10.0,
        p95_ms=20.0,
        p99_ms=30.0,
        p99_now_ms=25.0,
        server=server_delta(),
    )
    measured = tg.Measured(
        requests=42, failures=2, samples=80, duration_s=10.0, avg_ms=12.0, p95_ms=20.0, p99_ms=30.0
    )
    checks = tg.evaluate(tg.Targets(perf_latency_p99=25, perf_throughput=5), measured)
    return Snapshot(
        "running",
        elapsed_s=10.0,
        duration_s=10.0,
        models=[model],
        checks=checks,
        warnings=["WARNING: the load generator's CPU was saturated"],
        cpu_percent=cpu,
        final=final,
    )


def test_tab_rows_show_per_model_figures_targets_and_warnings() -> None:
    rows = {(r["model"], r["figure"]): r for r in tab_rows(snapshot())}
    assert rows["dlrm_onnx", "samples/s (now)"]["value"] == "8"
    assert rows["dlrm_onnx", "requests/s (now)"]["value"] == "4"
    assert rows["dlrm_onnx", "samples per request"]["value"] == "2"
    assert rows["dlrm_onnx", "batch-size histogram (size x executions)"]["value"] == "2 x 4, 8 x 8"
    assert rows["dlrm_onnx", "server avg batch size"]["value"] == "6.67"
    assert rows["dlrm_onnx", "server avg queue (us)"]["value"] == "5,000"
    assert rows["dlrm_onnx", "server avg compute infer (us)"]["value"] == "3,000"
    assert rows["dlrm_onnx", "client-side overhead (ms per request)"]["value"] == "3"
    p99 = rows[AGGREGATED, "perf_latency_p99 (ms)"]
    assert (p99["value"], p99["target"], p99["status"]) == ("30", "<= 25", "FAIL")
    throughput = rows[AGGREGATED, "perf_throughput (samples/s)"]
    assert (throughput["value"], throughput["target"], throughput["status"]) == (
        "8",
        ">= 5",
        "PASS",
    )
    assert rows[AGGREGATED, "warning"]["value"].startswith("the load generator's CPU")
    verdict = rows[AGGREGATED, "verdict so far"]
    assert verdict["status"] == "FAIL" and "perf_latency_p99 (ms) measured 30" in verdict["value"]
    assert rows[AGGREGATED, "load generator CPU (% of a core, now)"]["status"] == "OK"


def test_tab_rows_before_a_run_and_at_its_end() -> None:
    (row,) = tab_rows(None)
    assert row["figure"] == "no test has run yet"
    final = {(r["model"], r["figure"]): r for r in tab_rows(snapshot(final=True, cpu=95))}
    assert (AGGREGATED, "verdict") in final
    assert (
        final[AGGREGATED, "load generator CPU (% of a core, run average)"]["status"] == "SATURATED"
    )


def test_stream_rows_show_ttft_itl_tokens_goodput_and_checked_streams() -> None:
    streams = StreamsNow(
        "tiny_generator",
        streams=40,
        failed=1,
        tokens=640,
        checked=20,
        mismatched=1,
        ttft_p50_ms=12.34,
        ttft_p99_ms=88.0,
        itl_p50_ms=1.5,
        itl_p99_ms=20.5,
        tokens_per_s=120.0,
        run_tokens_per_s=100.0,
        goodput=0.975,
        ttft_p99_now_ms=70.0,
        itl_p99_now_ms=15.0,
    )
    base = snapshot()
    running = Snapshot("running", 10.0, 10.0, base.models, streams=streams)
    rows = {(r["model"], r["figure"]): r["value"] for r in tab_rows(running)}
    # each stream that ended counted once: 40 complete + 1 failed; the mismatched one checked
    # is the failed one
    assert rows["tiny_generator", "streams ended (complete + failed)"] == "41 (40 + 1)"
    assert rows["tiny_generator", "time to first token p50 (ms)"] == "12.3"
    assert rows["tiny_generator", "time to first token p99 (ms)"] == "88.0"
    assert rows["tiny_generator", "inter-token latency p99 (ms)"] == "20.5"
    assert rows["tiny_generator", "output tokens/s (now)"] == "120"
    assert rows["tiny_generator", "stream goodput"] == "0.975"
    assert rows["tiny_generator", "streams checked (agreed + mismatched)"] == "20 (19 + 1)"
    # the charts page's lines: tokens/s, TTFT p99 and ITL p99 over about the last 10 s
    point = chart_point(running)
    assert point["streams"] == {"tokens_s": 120.0, "ttft_p99_ms": 70.0, "itl_p99_ms": 15.0}
    assert chart_point(base)["streams"] is None  # no streams: no stream lines
    assert as_json(running, [point])["streams"]["ttft_p50_ms"] == 12.34
    final = Snapshot("stopped", 10.0, 10.0, [], final=True, streams=streams)
    rows = {(r["model"], r["figure"]): r["value"] for r in tab_rows(final)}
    assert rows["tiny_generator", "output tokens/s (run average)"] == "100"
    without_slo = Snapshot("running", 1.0, 1.0, [], streams=StreamsNow("m", 1, 0, 16, 0, 0))
    rows = {(r["model"], r["figure"]): r["value"] for r in tab_rows(without_slo)}
    assert rows["m", "stream goodput"].startswith("no SLO")
    assert rows["m", "time to first token p99 (ms)"] == "n/a"
    assert as_json(running, [])["streams"]["checked"] == 20
    assert as_json(base, [])["streams"] is None


def test_a_model_without_readable_statistics_says_so() -> None:
    figures = ModelFigures(
        "m", requests=1, failures=0, samples=1, request_rate=0.0, sample_rate=0.0
    )
    rows = tab_rows(Snapshot("running", 1.0, 1.0, [figures]))
    assert rows[-1]["figure"] == "server statistics" and rows[-1]["value"] == "not readable"


def test_samples_csv_has_locusts_columns_in_samples_and_the_servers_view() -> None:
    header, model, total = csv_rows(snapshot())
    assert header == CSV_HEADER
    row = dict(zip(header, model, strict=True))
    assert row["Name"] == "dlrm_onnx" and row["Samples"] == 80
    assert row["Requests/s"] == 4.0 and row["Samples/s"] == 8.0 and row["Samples/Request"] == 2.0
    assert row["Server Execution Count"] == 12 and row["Server Queue (us)"] == 5000.0
    totals = dict(zip(header, total, strict=True))
    assert totals["Name"] == AGGREGATED and totals["Samples/s"] == 8.0


def test_charts_json_carries_history_breakdown_and_histogram() -> None:
    data = as_json(snapshot(), [{"t": 2.0, "models": {}}])
    (model,) = data["models"]
    assert model["histogram"] == {"2": 4, "8": 8}
    assert set(model["breakdown_us"]) == {
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "overhead",
    }
    assert data["history"] == [{"t": 2.0, "models": {}}] and data["rows"]
    assert as_json(None, [])["state"] == "ready"


def test_a_refused_run_shows_only_why() -> None:
    """A run refused at its start shows the reason in place of figures, also over the live
    view of the run before it."""
    why = "HTTP 401 Unauthorized from https://h:1 (--host): pass --triton-headers"
    for before in (None, snapshot(final=True)):
        (row,) = tab_rows(before, why)
        assert row["status"] == "REFUSED" and row["value"] == why
        data = as_json(before, [], why)
        assert data["state"] == "refused" and data["refusal"] == why and data["rows"] == [row]
    assert as_json(None, [])["refusal"] is None


# -- where the web UI listens --------------------------------------------------------------------
@pytest.mark.parametrize("host", ["", "*", "0.0.0.0", "::", "192.0.2.10", "example.org"])
def test_a_web_ui_reachable_from_elsewhere_is_named(host: str) -> None:
    message = web_ui_exposure(host, web_login=False)
    assert message is not None and "--web-login" in message and WEB_HOST in message
    assert web_ui_exposure(host, web_login=True) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_a_loopback_web_ui_needs_no_warning(host: str) -> None:
    assert web_ui_exposure(host, web_login=False) is None


def test_locustfiles_default_the_web_ui_to_loopback() -> None:
    """On Locust's own parser (in a subprocess: importing locust patches the process): our
    default, then the command line and LOCUST_WEB_HOST over it."""
    code = """
import os
import locust.argument_parser as ap
from pytest_triton.load.runner.options import add_options
parser = ap.get_parser()
add_options(parser)
for env in (None, "127.0.0.3"):
    if env:
        os.environ["LOCUST_WEB_HOST"] = env
    print(parser.parse_args(["-f", "x.py"]).web_host)
    print(parser.parse_args(["-f", "x.py", "--web-host", "0.0.0.0"]).web_host)
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=subprocess_env(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [WEB_HOST, "0.0.0.0", "127.0.0.3", "0.0.0.0"]
