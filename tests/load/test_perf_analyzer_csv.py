"""triton-perf's CSV reads like perf_analyzer's: real perf_analyzer 2.51 (`make perf-analyzer`)
and triton-perf measure the same model on one real tritonserver, each writing its `-f` CSV;
a reader written against perf_analyzer's file (its column names, times in usec) must read
triton-perf's file too, and find the same kind of numbers in it."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest

from benchmarks.perf_analyzer_tool import MISSING, find_perf_analyzer, run_perf_analyzer
from pytest_triton.load.runner.embedded import EmbeddedModel
from pytest_triton.server.launcher import Endpoints
from tests.helpers.locust_runs import Locust
from tests.helpers.probe_models import probe_spec

PERF_ANALYZER = find_perf_analyzer()
pytestmark = [
    pytest.mark.load,
    pytest.mark.skipif(PERF_ANALYZER is None, reason=MISSING),
]
MODEL = EmbeddedModel(probe_spec).model_name()
# A closed loop of 2 on the probe model (batches wait up to 20 ms): ~10-20 ms per request,
# about a hundred requests per 1 s window. Stability is not the subject: asked within 100%.
WINDOW_MS = "1000"


def read_perf_csv(path: Path, columns: list[str]) -> list[dict[str, float]]:
    """A perf_analyzer CSV reader: rows of the named columns as numbers (latencies and server
    times in usec, throughput in inferences per second); KeyError for a missing column,
    ValueError for a cell that is not a number. The table ends at the first blank row."""
    with open(path, newline="") as fh:
        rows = []
        for row in csv.DictReader(fh):
            if not any((v or "").strip() for v in row.values()):
                break
            rows.append({c: float(row[c]) for c in columns})
    return rows


def test_a_perf_analyzer_csv_reader_reads_triton_perfs_csv(
    probe_server: Endpoints, tmp_path: Path
) -> None:
    assert PERF_ANALYZER is not None
    pa_csv = tmp_path / "perf_analyzer.csv"
    target = ["-m", MODEL, "-u", probe_server.http, "-i", "http", "-b", "1"]
    load = ["--concurrency-range", "2", "-p", WINDOW_MS, "-s", "100", "-r", "10"]
    done = run_perf_analyzer(PERF_ANALYZER, [*target, *load], pa_csv, timeout_s=120)
    assert done.returncode == 0, done.output[-3000:]
    with open(pa_csv, newline="") as fh:
        columns = next(csv.reader(fh))
    # What perf_analyzer 2.51 writes for concurrency mode (the file users' tooling reads)
    assert columns[:2] == ["Concurrency", "Inferences/Second"]
    assert {"Client Send", "Server Queue", "Server Compute Infer", "p99 latency"} <= set(columns)
    (pa,) = read_perf_csv(pa_csv, columns)
    assert pa["Concurrency"] == 2 and pa["Inferences/Second"] > 0
    assert 0 < pa["p50 latency"] <= pa["p99 latency"]

    tp_csv = tmp_path / "triton-perf.csv"
    run = Locust(
        [
            *(sys.executable, "-m", "pytest_triton.cli.triton_perf"),
            *("-m", "tests.helpers.probe_models:probe_spec", "--model-name", MODEL),
            *("--url", f"http://{probe_server.http}", "-b", "1", "--concurrency-range", "2"),
            *("--triton-measurement-interval", WINDOW_MS, "--triton-load-warmup", "500"),
            *("--max-trials", "4", "-f", str(tp_csv), "--no-progress"),
        ]
    )
    finished = run.finish(180)
    assert finished.code == 0, finished.tail()
    with open(tp_csv, newline="") as fh:
        header = next(csv.reader(fh))
    missing = [c for c in columns if c not in header]
    assert not missing, f"triton-perf's CSV lacks perf_analyzer's columns {missing}"
    (tp,) = read_perf_csv(tp_csv, columns)
    assert tp["Concurrency"] == 2
    # Same server, same load: the same magnitudes. A unit slip (ms for usec) is a factor of
    # 1000; the tools' own overheads are far below a factor of 3, but the two runs follow
    # each other on a machine the suite's other worker shares: its CPU bursts moved
    # perf_analyzer's p99 4x (92.9 vs 24.0 ms) and its server compute 3.1x (2,887 vs 927 us,
    # the hosted model waiting for a core). So rates, medians and compute are held to a factor
    # of 10, a p99 (a run's few slowest requests) to 30: both far from a unit's 1000.
    within = {"Inferences/Second": 10, "p50 latency": 10, "Server Compute Infer": 10}
    for column, factor in {**within, "p99 latency": 30}.items():
        ratio = tp[column] / pa[column] if pa[column] else math.inf
        assert 1 / factor <= ratio <= factor, f"{column}: triton-perf {tp[column]} vs {pa[column]}"
    for column in columns:
        assert tp[column] >= 0, column
