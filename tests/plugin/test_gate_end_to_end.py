"""`make gate`'s pytest run, as a subprocess: the examples' parity and DLRM load gate write the
report (report.json, report.md with the headroom table and the load verdict, JUnit XML, both
plots) and a baseline; against a baseline edited to be 50% faster the gate exits non-zero and
names the throughput regression."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_triton

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = [pytest.mark.load, pytest.mark.triton]


def gate(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The Makefile's gate recipe (pytest examples -v --triton-report DIR ...), selected down."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "GITHUB_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "examples", "-v", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_gate_report_and_a_faster_baseline(tmp_path: Path) -> None:
    recipe = (REPO / "Makefile").read_text()
    assert "$(BIN)/pytest examples -v --triton-report $(GATE_REPORT)" in recipe
    out, baseline = tmp_path / "gate-report", tmp_path / "baseline.json"
    first = gate(
        "-k",
        "dlrm-onnx-hosted-http or load_targets",
        "--triton-report",
        str(out),
        "--triton-save-baseline",
        str(baseline),
    )
    tail = (first.stdout + first.stderr)[-4000:]
    assert first.returncode == 0, tail
    assert "3 passed" in first.stdout and "gate: PASS" in first.stdout, tail
    assert {p.name for p in out.iterdir()} >= {
        "report.json",
        "report.md",
        "junit.xml",
        "parity-headroom.png",
        "load-latency.png",
        "load-dlrm.json",
    }
    for png in ("parity-headroom.png", "load-latency.png"):
        assert (out / png).read_bytes().startswith(PNG)
    markdown = (out / "report.md").read_text()
    assert markdown.startswith("# Release gate: PASS")
    assert re.search(
        r"\| dlrm-onnx-hosted \| http \| none \| 2 \| output \(FP32\) \| .* \| "
        r"1\.3e-06 / 1e-05 \| [0-9.]+% \| PASS \|",
        markdown,
    ), markdown
    assert re.search(r"\| dlrm \| locust \| dlrm_onnx \| [0-9,]+ \| .* \| PASS \|", markdown)
    assert "perf_throughput >= 10,000 samples/s:" in markdown, markdown
    report = json.loads((out / "report.json").read_text())
    (run,) = report["load"]
    assert run["passed"] is True and run["points"][0]["throughput"] > 10_000
    assert len(run["points"][0]["windows"]) >= 3  # 1 s windows of a 7 s run, after warm-up
    assert run["stability"] and "Measurement windows of dlrm:" in markdown
    assert run["server"][0]["model"] == "dlrm_onnx"  # the session's own server took the load
    assert report["servers"][0]["http"] in run["host"]

    saved = json.loads(baseline.read_text())
    saved["load"][0]["points"][0]["throughput"] *= 1.5  # "the last release was 50% faster"
    baseline.write_text(json.dumps(saved))
    # The load result stays in the report directory; this run measures parity only, so the
    # comparison is of the same load figures against a baseline 1.5x as fast: down 33.3%.
    second = gate(
        "-k",
        "test_served_model_matches_pytorch and dlrm-onnx-hosted-http",
        "--triton-report",
        str(out),
        "--triton-baseline",
        str(baseline),
    )
    tail = (second.stdout + second.stderr)[-4000:]
    assert second.returncode == 1, tail
    assert "1 passed" in second.stdout, tail
    assert re.search(
        r"baseline \S+baseline.json: \d+ comparisons, 1 regression\(s\)\n"
        r"  REGRESSION dlrm: throughput down 33\.3% \([0-9,]+ -> [0-9,]+; "
        r"limit 10%\)\n",
        second.stdout,
    ), tail
    markdown = (out / "report.md").read_text()
    assert markdown.startswith(
        f"# Release gate: FAIL\n\nGated by pytest-triton {pytest_triton.__version__}.\n\n"
        "- 1 regression(s) against the baseline"
    )
    assert re.search(
        r"\| load \| dlrm \| throughput \| [0-9,]+ \| [0-9,]+ \| -33\.3% \| 10% "
        r"\| \d+ \| REGRESSION \|",
        markdown,
    ), markdown
    assert "load-dlrm.json was written before this session started" in markdown
    assert json.loads((out / "report.json").read_text())["verdict"]["passed"] is False
