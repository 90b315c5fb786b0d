"""benchmarks/soak.py: its verdict on made-up samples, and a 12-second run of the real thing
(its figures are not judged here, only that they are complete and the exit status says what the
report says; the 10-minute figures are in the README)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.soak import MB, Sample, judge, seconds
from tests.helpers.leftovers import left_by

pytestmark = [pytest.mark.reliability]
REPO_ROOT = Path(__file__).resolve().parents[2]


def samples(server_mb: list[float], rate: float = 100.0, client_mb: float = 300.0) -> list[Sample]:
    """One sample a second; no requests yet in the first two."""
    out = [
        Sample(0.0, int(server_mb[0] * MB), int(client_mb * MB), 0),
        Sample(1.0, int(server_mb[0] * MB), int(client_mb * MB), 0),
    ]
    for i, mb in enumerate(server_mb):
        out.append(Sample(2.0 + i, int(mb * MB), int(client_mb * MB), int(rate * (i + 1))))
    return out


def test_a_steady_run_passes() -> None:
    report = judge(
        samples([400.0] * 30),
        window_s=10,
        requests=3000,
        failures=0,
        max_growth=0.05,
        model="m",
        protocol="http",
        users=8,
        duration_s=30,
    )
    assert report.passed and not report.reasons
    assert report.first.end <= report.last.start
    assert report.first.throughput == pytest.approx(100.0)
    assert report.throughput_drift == pytest.approx(0.0)
    assert report.throughputs == pytest.approx([100.0] * 2)  # 29 s of load: two whole windows
    assert "RESULT: PASS" in report.text()


def test_rss_growth_above_the_limit_fails_and_says_how_much() -> None:
    report = judge(
        samples([400.0] * 15 + [430.0] * 15),
        window_s=10,
        requests=3000,
        failures=0,
        max_growth=0.05,
        model="m",
        protocol="http",
        users=8,
        duration_s=30,
    )
    assert not report.passed
    assert report.server_rss_growth == pytest.approx(0.075)
    assert report.reasons == ["server RSS grew 7.50% (limit 5%)"]


def test_any_failed_request_fails_the_soak() -> None:
    report = judge(
        samples([400.0] * 30),
        window_s=10,
        requests=3000,
        failures=1,
        max_growth=0.05,
        model="m",
        protocol="http",
        users=8,
        duration_s=30,
    )
    assert not report.passed and report.reasons == ["1 of 3000 requests failed"]


def test_windows_never_overlap_in_a_short_run() -> None:
    report = judge(
        samples([400.0] * 6),
        window_s=60,
        requests=600,
        failures=0,
        max_growth=0.05,
        model="m",
        protocol="http",
        users=8,
        duration_s=6,
    )
    assert report.first.end <= report.last.start


def test_durations_read_like_locusts() -> None:
    assert [seconds(t) for t in ("10m", "90s", "1h30m", "45")] == [600, 90, 5400, 45]
    with pytest.raises(Exception, match="is not a duration"):
        seconds("ten minutes")


@pytest.mark.triton
@pytest.mark.load
def test_a_short_soak_reports_every_figure(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "LOCUST_"))}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=str(REPO_ROOT))
    soak = subprocess.Popen(
        [
            sys.executable,
            "benchmarks/soak.py",
            "--duration",
            "12s",
            "--window",
            "3s",
            "--sample-interval",
            "1s",
            "--report-json",
            str(report_path),
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = soak.communicate(timeout=400)
    assert soak.returncode in (0, 1), output[-3000:]
    report = json.loads(report_path.read_text())
    assert (soak.returncode == 0) == report["passed"], output[-3000:]
    assert report["requests"] > 100 and report["failures"] == 0, output[-3000:]
    first, last = report["first"], report["last"]
    assert first["start"] < first["end"] <= last["start"] < last["end"]
    for w in (first, last):
        assert w["throughput"] > 0 and w["server_rss_mb"] > 50 and w["client_rss_mb"] > 50
    assert len(report["samples"]) >= 9 and len(report["throughputs"]) >= 2
    assert "RESULT: " in output and "server RSS (tritonserver + stubs)" in output
    assert not left_by(soak.pid, tmp_path), left_by(soak.pid, tmp_path)
