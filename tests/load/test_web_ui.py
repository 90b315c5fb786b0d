"""Locust's web UI as a person sees it: a real run against the embedded server (distributed:
a master and two workers, so the tab shows the master's totals), the Triton tab and the charts
page rendered by headless Chromium while the load runs; the same for streams from a decoupled
model, whose counts the master merges from its workers; and where the web UI listens."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers import browser
from tests.helpers.locust_runs import (
    PROBE_LOCUSTFILE,
    REPO,
    Locust,
    free_port,
    get_json,
    locust_args,
    subprocess_env,
)

pytestmark = [pytest.mark.load, pytest.mark.triton]
# `make screenshots` sets this to refresh the README's images from this very test.
SCREENSHOTS = os.environ.get("PYTEST_TRITON_SCREENSHOTS")
RUN_TIME_S = 45 if SCREENSHOTS else 20  # screenshots: time for some history while it runs
LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "probe_and_streams.py"
STREAM_MODEL = "tiny_stream"
PROBE = "probe_onnx"
USERS = 10  # 6 probe users and 4 streaming ones, half of each on either worker


def wait_for_load(run: Locust, base: str, timeout: float) -> dict[str, Any]:
    """The live view once it reports a non-zero samples/s for the probe model and checked
    streams with tokens/s (the web UI starts after the embedded server is up; Locust's
    current rates need a few seconds of load)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.proc.poll() is None:
        live = get_json(f"{base}/triton/live.json")
        models = {m["model"]: m for m in live["models"]} if live else {}
        streams = live and live.get("streams")
        if (
            PROBE in models
            and models[PROBE]["samples_s"] > 0
            and streams
            and streams["checked"] > 0
            and (streams["tokens_per_s"] or 0) > 0
        ):
            return live  # type: ignore[return-value]
        time.sleep(0.5)
    run.kill()
    pytest.fail(f"the Triton tab never showed load within {timeout:.0f}s:\n{run.finish(5).tail()}")


def listening(pid: int, port: int) -> set[str]:
    """The addresses a process (or its children) listens on at `port`."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return {
        c.laddr.ip
        for p in procs
        for c in p.net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


def rows_by_figure(html: str) -> dict[tuple[str, str], list[str]]:
    return {(r[0], r[1]): r for r in browser.table_rows(html) if len(r) == 5}


def number(text: str) -> float:
    return float(text.replace(",", ""))


def save_screenshots(base: str) -> None:
    """The README's images of the tab and the charts page, small palette PNGs (after some
    seconds of load, so the charts have a history to draw)."""
    from PIL import Image

    deadline = time.monotonic() + RUN_TIME_S
    while time.monotonic() < deadline:
        live = get_json(f"{base}/triton/live.json")
        if live is None or live["elapsed_s"] >= 12 or live["state"] != "running":
            break
        time.sleep(0.5)
    out = Path(SCREENSHOTS or ".").resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name, url, size in (
        ("webui-triton-charts.png", f"{base}/triton", (1280, 1000)),
        ("webui-triton-tab.png", f"{base}/?tab=triton", (1280, 1560)),
    ):
        browser.render(url, screenshot=out / name, window=size)
        with Image.open(out / name) as image:
            image.convert("RGB").quantize(colors=128).save(out / name, optimize=True)


def test_triton_tab_shows_live_figures_in_headless_chromium(tmp_path: Path) -> None:
    """The probe model and the streaming generator under load from a master and two worker
    processes, on the run's own server. The load runs for at most RUN_TIME_S; the web UI
    stays up afterwards (--autoquit) so a slow browser on a busy machine still finds it, and
    the test ends Locust with SIGTERM as soon as it has seen the pages. The Triton tab shows
    the probe's figures and the streams' (TTFT, ITL, tokens/s, goodput, checked streams); at
    the end the master's whole-run stream counts equal the sum of what each worker counted
    itself, and the server answered as many streams (plus those in flight at the stop)."""
    browser.chromium()  # no browser: fail now, before starting anything
    port, master_port = free_port(), free_port()
    report, counts = tmp_path / "report.json", tmp_path / "counts"
    counts.mkdir()
    base = f"http://127.0.0.1:{port}"
    run = Locust(
        locust_args(
            LOCUSTFILE,
            "--web-port", str(port),
            "--autostart",
            "-u", str(USERS), "-r", str(USERS),
            "-t", f"{RUN_TIME_S}s",
            "--autoquit", "120",
            "--processes", "2",
            "--master-bind-host", "127.0.0.1",
            "--master-bind-port", str(master_port),
            "--master-port", str(master_port),
            "--csv", str(tmp_path / "run"),
            "--triton-check-every", "2",
            "--perf-ttft-p99", "5000",
            "--perf-stream-goodput", "0.5",
            "--perf-slo-ttft-ms", "5000",
            report=report,
        ),
        report,
        env=subprocess_env(STREAM_COUNTS_DIR=str(counts)),
    )  # fmt: skip
    try:
        live = wait_for_load(run, base, timeout=180)
        assert live["state"] == "running", live["state"]
        # pytest-triton's default for every locustfile that uses its users: loopback only
        assert listening(run.proc.pid, port) == {"127.0.0.1"}

        tab = browser.render(f"{base}/?tab=triton")
        assert "TRITON" in tab.upper() and "probe_onnx" in tab
        rows = rows_by_figure(tab)
        assert number(rows["probe_onnx", "samples/s (now)"][2]) > 0, rows
        assert number(rows["probe_onnx", "requests/s (now)"][2]) > 0, rows
        histogram = rows["probe_onnx", "batch-size histogram (size x executions)"][2]
        assert re.fullmatch(r"\d+ x \d+(, \d+ x \d+)*", histogram), histogram
        sizes = [int(pair.split(" x ")[0]) for pair in histogram.split(", ")]
        assert max(sizes) > 1, f"6 users in flight should batch: {histogram}"
        assert rows["Aggregated", "perf_fail_ratio"][3:] == ["<= 0", "PASS"], rows
        assert_stream_rows(rows)

        charts = browser.render(f"{base}/triton")
        points = re.search(r'data-chart="samples" data-points="(\d+)"', charts)
        assert points and int(points.group(1)) >= 1, charts[:2000]
        assert re.search(r'class="line" d="M[\d.]+,[\d.]+', charts), "no samples/s line drawn"
        bars = re.search(r'data-chart="histogram" data-bars="(\d+)"', charts)
        assert bars and int(bars.group(1)) >= 1
        assert re.search(r'data-phase="compute_infer"', charts)
        assert_stream_charts(charts)
        if SCREENSHOTS:
            save_screenshots(base)
    finally:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGTERM)
        done = run.finish(timeout=90)
    assert done.code == 0, done.tail()
    assert done.report is not None
    measured = done.report["measured"]
    assert measured["samples"] == measured["requests"] - measured["failures"] > 0  # batch 1
    # the workers' CPU reaches the master within the run (Locust's own arrives after 20 s)
    assert done.report["generator_cpu_percent"] > 0, done.report
    with (tmp_path / "run_triton.csv").open() as f:
        triton = {row["Name"]: row for row in csv.DictReader(f)}
    assert int(triton["Aggregated"]["Samples"]) == measured["samples"]
    assert float(triton["probe_onnx"]["Samples/s"]) > 0
    assert_streams_add_up(done.report, counts)


def assert_stream_rows(rows: dict[tuple[str, str], list[str]]) -> None:
    """The streams' rows of the Triton tab, with plausible values."""
    values = {figure: row[2] for (model, figure), row in rows.items() if model == STREAM_MODEL}
    ttft = [number(values[f"time to first token {p} (ms)"]) for p in ("p50", "p99")]
    itl = [number(values[f"inter-token latency {p} (ms)"]) for p in ("p50", "p99")]
    assert 0 < ttft[0] <= ttft[1] and 0 <= itl[0] <= itl[1], values
    # "now" while the load runs, the run's average once it stopped (a slow browser may see it)
    rate = values.get("output tokens/s (now)") or values["output tokens/s (run average)"]
    assert number(rate) > 0, values
    assert 0 < number(values["stream goodput"]) <= 1, values
    counted = r"([\d,]+) \(([\d,]+) \+ ([\d,]+)\)"  # total (one + other), each stream once
    checked = re.fullmatch(counted, values["streams checked (agreed + mismatched)"])
    assert checked and number(checked[1]) > 0 and checked[3] == "0", values
    assert number(checked[1]) == number(checked[2]), values
    ended = re.fullmatch(counted, values["streams ended (complete + failed)"])
    assert ended and number(ended[1]) == number(ended[2]) + number(ended[3]), values
    assert number(ended[2]) >= number(checked[2]), values
    target = rows["Aggregated", "perf_ttft_p99 (ms)"]
    assert target[3:] == ["<= 5,000", "PASS"] and number(target[2]) > 0, target


def assert_stream_charts(charts: str) -> None:
    """The charts page draws the streams' card: TTFT, ITL and tokens/s over time, each a
    line through at least one point."""
    assert 'data-model="streams"' in charts, charts[:2000]
    for chart in ("tokens", "ttft", "itl"):
        svg = re.search(rf'data-chart="{chart}" data-points="(\d+)">(.*?)</svg>', charts, re.S)
        assert svg and int(svg[1]) >= 1, (chart, charts[:2000])
        assert re.search(r'class="line" d="M[\d.]+,[\d.]+', svg[2]), (chart, svg[0])


def assert_streams_add_up(report: dict[str, Any], counts: Path) -> None:
    """The master's whole-run stream counts are the sum of what each worker counted itself
    (tests/helpers/locustfiles/probe_and_streams.py), and the server's agree."""
    assert report["streams"] is not None, report
    merged = report["streams"]["run"]
    sent = [json.loads(path.read_text()) for path in sorted(counts.glob("worker-*.json"))]
    assert len(sent) == 2 and all(worker["streams"] > 0 for worker in sent), sent
    for ours, theirs in (
        ("streams", "streams"),
        ("failed_streams", "failed"),
        ("output_tokens", "tokens"),
        ("checked_streams", "checked"),
        ("mismatched_streams", "mismatched"),
    ):
        assert merged[ours] == sum(worker[theirs] for worker in sent), (ours, merged, sent)
    assert merged["failed_streams"] == merged["mismatched_streams"] == 0, merged
    assert merged["output_tokens"] == 8 * merged["streams"]
    assert merged["checked_streams"] >= merged["streams"] // 2 - 4, merged  # 4 stream users
    (server,) = [s for s in report["server"] if s["model"] == STREAM_MODEL]
    assert 0 <= server["success_count"] - merged["streams"] <= 4, (server, merged)


def test_an_explicit_loopback_web_host_wins(tmp_path: Path) -> None:
    """--web-host still decides (127.0.0.2 is loopback too, so nothing is exposed here)."""
    port = free_port()
    run = Locust(
        locust_args(
            PROBE_LOCUSTFILE,
            "--web-host",
            "127.0.0.2",
            "--web-port",
            str(port),
            "--host",
            "http://127.0.0.1:9",
        )
    )
    try:
        deadline = time.monotonic() + 60
        while (
            not listening(run.proc.pid, port)
            and time.monotonic() < deadline
            and run.proc.poll() is None
        ):
            time.sleep(0.2)
        assert listening(run.proc.pid, port) == {"127.0.0.2"}, run.stderr_so_far[-2000:]
    finally:
        run.kill()
    assert "without --web-login" not in run.stderr_so_far


def test_a_web_ui_open_to_other_machines_is_warned_about(tmp_path: Path) -> None:
    """A non-loopback --web-host without --web-login gets a warning naming the fix. The
    address is a documentation one (TEST-NET-1) that this machine does not have: Locust
    cannot bind it and exits, so the test never opens a port to the network."""
    run = Locust(
        locust_args(
            PROBE_LOCUSTFILE,
            "--web-host",
            "192.0.2.10",
            "--web-port",
            str(free_port()),
            "--host",
            "http://127.0.0.1:9",
        )
    )
    done = run.finish(timeout=60)
    assert "the web UI listens on 192.0.2.10 without --web-login" in done.output, done.tail()
    assert "--web-login, or leave out --web-host" in done.output
