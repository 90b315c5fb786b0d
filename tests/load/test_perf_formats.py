"""triton-perf in PyTorch 2's formats, and a sweep over formats in one run (--triton-formats):
the refusals and the reports need no server; a real run serves the zoo's DLRM (small) as a
torch.export program on the bundled server with every answer checked against eager PyTorch,
and, under `-m slow` (an AOTInductor compile is tens of seconds), sweeps MNIST as
torch-export and AOTInductor in one run, a row per format."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_triton.base.errors import ConfigError
from pytest_triton.cli.triton_perf import _parser, perf_config
from pytest_triton.gate.load_results import load_run
from pytest_triton.load.perf.command import perf_formats
from pytest_triton.load.perf.points import Point
from pytest_triton.load.perf.report import csv_columns, points_markdown, write_reports
from tests.helpers.locust_runs import Locust, subprocess_env, triton_perf_args

SHORT = (  # a point: 200 ms of warm-up, then 300 ms windows (stable within 50%, or 3 tried)
    "--triton-load-warmup",
    "200",
    "--triton-measurement-interval",
    "300",
    "--triton-stability-percentage",
    "50",
    "--max-trials",
    "3",
    "--no-progress",
)


def _config(*argv: str) -> Any:
    return perf_config(_parser().parse_args(["-m", "mnist", *argv]))


def _formats(*argv: str) -> list[str]:
    return perf_formats(_config(*argv), "mnist", "small")


# -- units: no server ------------------------------------------------------------------------
def test_the_formats_of_a_run_are_asked_once_and_checked_before_any_export() -> None:
    assert _formats() == ["onnx"]  # the default of a load run
    assert _formats("--triton-format", "torch-export") == ["torch-export"]
    assert _formats("--triton-formats", "torchscript-trace,torch-export,aoti") == [
        "torchscript-trace",
        "torch-export",
        "aoti",
    ]
    assert _formats("--formats", "aoti,onnx") == ["aoti", "onnx"]  # perf_analyzer-style alias


def test_a_format_sweep_that_cannot_run_is_refused_naming_what_to_do() -> None:
    with pytest.raises(ConfigError) as unknown:
        _config("--triton-formats", "onnx,torchexport")
    assert "unknown format(s) ['torchexport']" in str(unknown.value)
    assert "choose from torchscript-script, torchscript-trace, onnx, torch-export, aoti" in str(
        unknown.value
    )
    with pytest.raises(ConfigError, match="'tensorrt' cannot be served on CPU; choose from "):
        _formats("--triton-formats", "onnx,tensorrt")
    with pytest.raises(ConfigError, match=r"give one of them \(e.g. --triton-formats aoti,onnx\)"):
        _formats("--triton-format", "aoti", "--triton-formats", "onnx")
    with pytest.raises(ConfigError, match="the server at --url serves what it was given"):
        _formats("--url", "http://127.0.0.1:1", "--triton-formats", "onnx,aoti")
    stream = perf_config(
        _parser().parse_args(["-m", "tiny_stream", "--triton-formats", "onnx,aoti"])
    )
    with pytest.raises(ConfigError, match="-m tiny_stream is a stream model, served as it is"):
        perf_formats(stream, "tiny_stream", "small")


def _point(fmt: str, concurrency: int, throughput_requests: int, p99: float) -> Point:
    return Point(
        batch_size=1,
        concurrency=concurrency,
        duration_s=1.0,
        requests=throughput_requests,
        failures=0,
        avg_ms=p99 / 2,
        p50_ms=p99 / 2,
        p90_ms=p99,
        p95_ms=p99,
        p99_ms=p99,
        format=fmt,
    )


def test_a_sweep_over_formats_reports_a_row_per_format_and_point(tmp_path: Path) -> None:
    points = [
        _point("torch-export", 1, 400, 4.0),
        _point("torch-export", 2, 600, 9.0),
        _point("aoti", 1, 500, 3.0),
        _point("aoti", 2, 900, 6.0),
    ]
    table = points_markdown(points, "img/s").splitlines()
    assert table[0].startswith("| **Format** | **Concurrency** | **Throughput** |")
    assert [row.split(" | ")[0] for row in table[2:]] == ["| torch-export"] * 2 + ["| aoti"] * 2
    assert "Format" in [name for name, _ in csv_columns(points)]
    assert "Format" not in [name for name, _ in csv_columns(points[:2])]  # one format: as before
    args = argparse.Namespace(
        latency_bound=8.0,
        percentile=99,
        csv=tmp_path / "sweep.csv",
        markdown=None,
        plot=tmp_path / "sweep.png",
        json=tmp_path / "sweep.json",
    )
    write_reports(points, args, "img/s", "mnist_torch-export, mnist_aoti")
    with open(tmp_path / "sweep.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["Format"], r["Concurrency"]) for r in rows] == [
        ("torch-export", "1"),
        ("torch-export", "2"),
        ("aoti", "1"),
        ("aoti", "2"),
    ]
    document = json.loads((tmp_path / "sweep.json").read_text())
    assert [p["format"] for p in document["points"]] == ["torch-export"] * 2 + ["aoti"] * 2
    held = document["within_bound"]  # per format: the 8 ms bound holds at 1 and at 2
    assert {k: v["concurrency"] for k, v in held.items()} == {"torch-export 1": 1, "aoti 1": 2}
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    run = load_run("mnist", "load-mnist.json", document)  # the gate report reads it
    assert [p["key"] for p in run["points"]][::2] == [
        "mnist torch-export batch 1 concurrency 1",
        "mnist aoti batch 1 concurrency 1",
    ]
    assert [h["key"] for h in run["within_bound"]] == [
        "mnist torch-export batch 1 concurrency 1",
        "mnist aoti batch 1 concurrency 2",
    ]


# -- real runs: the bundled server -----------------------------------------------------------
def _perf_run(
    tmp_path: Path, model: str, formats: str, timeout: float
) -> tuple[dict[str, Any], str]:
    """triton-perf on a zoo model (small) in `formats`, concurrency 2, every answer's values
    checked against eager PyTorch (a wrong one is a failed request); its JSON and stderr."""
    out = tmp_path / "sweep.json"
    done = Locust(
        [
            *triton_perf_args(model),
            *("--triton-formats", formats, "--concurrency-range", "2", "--check-every", "1"),
            *SHORT,
            *("--json", str(out), "-f", str(tmp_path / "sweep.csv")),
        ],
        env=subprocess_env(),
    ).finish(timeout)
    assert done.code == 0, done.tail()
    return json.loads(out.read_text()), done.stderr


def _assert_served_and_right(points: list[dict[str, Any]], fmt: str) -> None:
    (point,) = [p for p in points if p["format"] == fmt]
    assert point["requests"] > 0 and point["failures"] == 0, point  # no wrong answer
    assert point["throughput"] > 0 and 0 < point["p50_ms"] <= point["p99_ms"], point
    assert point["server_requests"] > 0, point  # the server counted the load it served


def test_triton_perf_serves_a_zoo_model_as_torch_export(tmp_path: Path) -> None:
    """DLRM, not MNIST: the zoo serves MNIST with NVIDIA's five CPU instances, five stubs that
    each import torch and load the program (32 core-s for the run against DLRM's 18)."""
    document, stderr = _perf_run(tmp_path, "dlrm", "torch-export", timeout=240)
    assert document["model"] == "dlrm_torch_export", document["model"]
    _assert_served_and_right(document["points"], "torch-export")
    assert "torch-export" in stderr


@pytest.mark.slow
def test_triton_perf_sweeps_torch_export_and_aoti_in_one_run(tmp_path: Path) -> None:
    document, _ = _perf_run(tmp_path, "mnist", "torch-export,aoti", timeout=600)
    assert [p["format"] for p in document["points"]] == ["torch-export", "aoti"]
    for fmt in ("torch-export", "aoti"):
        _assert_served_and_right(document["points"], fmt)
    with open(tmp_path / "sweep.csv", newline="") as fh:
        assert [r["Format"] for r in csv.DictReader(fh)] == ["torch-export", "aoti"]
