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
import urllib.request
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
    locust_args,
    subprocess_env,
)

pytestmark = [pytest.mark.load, pytest.mark.triton]
# `make screenshots` sets this to refresh the README's images from this very test.
SCREENSHOTS = os.environ.get("PYTEST_TRITON_SCREENSHOTS")
RUN_TIME_S = 45 if SCREENSHOTS else 20  # screenshots: time for some history while it runs
STREAMS_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "streams_counted.py"
STREAM_MODEL = "tiny_stream"


def get_json(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]
    except OSError:
        return None


def wait_for_load(run: Locust, base: str, timeout: float) -> dict[str, Any]:
    """The live view once it reports a non-zero samples/s (the web UI starts after the
    embedded server is up; Locust's current rates need a few seconds of load)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.proc.poll() is None:
        live = get_json(f"{base}/triton/live.json")
        if live and live["models"] and live["models"][0]["samples_s"] > 0:
            return live
        time.sleep(0.5)
    run.kill()
    pytest.fail(f"the Triton tab never showed load within {timeout:.0f}s:\n{run.finish(5).tail()}")


def wait_for_streams(run: Locust, base: str, timeout: float) -> dict[str, Any]:
    """The live view once streams were checked and a few seconds of tokens counted."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.proc.poll() is None:
        live = get_json(f"{base}/triton/live.json")
        streams = live and live.get("streams")
        if streams and streams["checked"] > 0 and (streams["tokens_per_s"] or 0) > 0:
            return live  # type: ignore[return-value]
        time.sleep(0.5)
    run.kill()
    pytest.fail(
        f"the Triton tab never showed streams within {timeout:.0f}s:\n{run.finish(5).tail()}"
    )


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
    """The load runs for at most RUN_TIME_S; the web UI stays up afterwards (--autoquit) so
    a slow browser on a busy machine still finds it, and the test ends Locust with SIGTERM as
    soon as it has seen the pages."""
    browser.chromium()  # no browser: fail now, before starting anything
    port, master_port = free_port(), free_port()
    report = tmp_path / "report.json"
    base = f"http://127.0.0.1:{port}"
    run = Locust(
        locust_args(
            PROBE_LOCUSTFILE,
            "--web-port",
            str(port),
            "--autostart",
            "-u",
            "8",
            "-r",
            "8",
            "-t",
            f"{RUN_TIME_S}s",
            "--autoquit",
            "120",
            "--processes",
            "2",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
            "--master-port",
            str(master_port),
            "--csv",
            str(tmp_path / "run"),
            report=report,
        ),
        report,
    )
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
        assert max(sizes) > 1, f"8 users in flight should batch: {histogram}"
        assert rows["Aggregated", "perf_fail_ratio"][3:] == ["<= 0", "PASS"], rows

        charts = browser.render(f"{base}/triton")
        points = re.search(r'data-chart="samples" data-points="(\d+)"', charts)
        assert points and int(points.group(1)) >= 1, charts[:2000]
        assert re.search(r'class="line" d="M[\d.]+,[\d.]+', charts), "no samples/s line drawn"
        bars = re.search(r'data-chart="histogram" data-bars="(\d+)"', charts)
        assert bars and int(bars.group(1)) >= 1
        assert re.search(r'data-phase="compute_infer"', charts)
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


def test_triton_tab_shows_stream_figures_and_workers_streams_add_up(tmp_path: Path) -> None:
    """One run of the streaming generator on its own embedded server, a master and two
    worker processes: the Triton tab shows TTFT, ITL, output tokens/s, goodput and the
    checked streams live; at the end the master's whole-run stream counts equal the sum of
    what each worker counted itself, and the server answered as many streams (plus those in
    flight when the users were stopped)."""
    browser.chromium()
    port, master_port = free_port(), free_port()
    counts, report = tmp_path / "counts", tmp_path / "report.json"
    counts.mkdir()
    users = 4
    base = f"http://127.0.0.1:{port}"
    run = Locust(
        locust_args(
            STREAMS_LOCUSTFILE,
            "--web-port", str(port),
            "--autostart",
            "-u", str(users), "-r", str(users),
            "-t", "20s",
            "--autoquit", "30",
            "--processes", "2",
            "--master-bind-host", "127.0.0.1",
            "--master-bind-port", str(master_port),
            "--master-port", str(master_port),
            "--triton-check-every", "2",
            "--triton-load-warmup", "1000",
            "--perf-ttft-p99", "5000",
            "--perf-stream-goodput", "0.5",
            "--perf-slo-ttft-ms", "5000",
            report=report,
        ),
        report,
        env=subprocess_env(STREAM_COUNTS_DIR=str(counts)),
    )  # fmt: skip
    try:
        wait_for_streams(run, base, timeout=180)
        rows = rows_by_figure(browser.render(f"{base}/?tab=triton"))
        values = {figure: row[2] for (model, figure), row in rows.items() if model == STREAM_MODEL}
        assert (
            0
            < number(values["time to first token p50 (ms)"])
            <= number(values["time to first token p99 (ms)"])
        ), values
        assert (
            0
            <= number(values["inter-token latency p50 (ms)"])
            <= number(values["inter-token latency p99 (ms)"])
        ), values
        assert number(values["output tokens/s (now)"]) > 0, values
        assert 0 < number(values["stream goodput"]) <= 1, values
        checked = re.fullmatch(r"([\d,]+) \(([\d,]+)\)", values["streams checked (mismatched)"])
        assert checked and number(checked.group(1)) > 0 and checked.group(2) == "0", values
        streamed = re.fullmatch(r"([\d,]+) \(([\d,]+)\)", values["streams (failed)"])
        assert streamed and number(streamed.group(1)) >= number(checked.group(1)), values
        ttft = rows["Aggregated", "perf_ttft_p99 (ms)"]
        assert ttft[3:] == ["<= 5,000", "PASS"] and number(ttft[2]) > 0, ttft
    finally:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGTERM)  # seen enough: stop the load now
        done = run.finish(timeout=120)
    assert done.code == 0, done.tail()
    assert done.report is not None and done.report["streams"] is not None, done.tail()
    merged = done.report["streams"]["run"]
    sent = [json.loads(path.read_text()) for path in sorted(counts.glob("worker-*.json"))]
    assert len(sent) == 2, (sent, done.tail())
    assert all(worker["streams"] > 0 for worker in sent), sent  # both workers streamed
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
    assert merged["checked_streams"] >= merged["streams"] // 2 - users, merged
    (server,) = [s for s in done.report["server"] if s["model"] == STREAM_MODEL]
    in_flight = server["success_count"] - merged["streams"]
    assert 0 <= in_flight <= users, (server, merged)


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
