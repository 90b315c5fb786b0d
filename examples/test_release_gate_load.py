"""Fails the release when DLRM under load misses its targets.

The DLRM locustfile runs for a few seconds against this session's own server (the variant the
parity tests checked), in a subprocess: importing locust would patch pytest's process with
gevent. Its verdict file, `load-dlrm.json` in the --triton-report directory, joins the gate
report (throughput, p50/p95/p99, targets, the server's batching) and the baseline comparison.

The targets hold with a wide margin on a 2-core CPU shared with other work (measured there:
34,000-130,000 samples/s and a p99 of 50-280 ms at 2 users x 1024 rows); set your own for your
hardware. One-second measurement windows after a one-second warm-up: the report and a baseline
compare medians over them. On such a shared machine consecutive windows often differ by more
than the 10% that makes a measurement stable, so the gate reports stability without failing on
it (--triton-allow-unstable); drop that flag on a dedicated runner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_triton import Deployment

LOCUSTFILE = Path(__file__).resolve().parent.parent / "locustfiles" / "dlrm.py"
USERS, ROWS, SECONDS = 2, 1024, 7
TARGETS = {"--perf-throughput": "10000", "--perf-latency-p99": "2000", "--perf-fail-ratio": "0"}
WINDOWS = (
    "--triton-load-warmup",
    "1000",
    "--triton-measurement-interval",
    "1000",
    "--triton-allow-unstable",
)


def dlrm_variant(server: Deployment) -> str:
    """The ONNX variant when this session serves one (the locustfile's default), else any."""
    ids = [v.id for v in server.repository.variants if v.spec.name == "dlrm"]
    if not ids:
        pytest.skip("no DLRM variant is served in this session (--triton-formats?)")
    return next((i for i in ids if i.startswith("dlrm-onnx-")), ids[0])


@pytest.mark.load
def test_dlrm_meets_its_load_targets(
    triton_server: Deployment, gate_report_dir: Path, locust_gate: Callable[..., None]
) -> None:
    model = triton_server.model(dlrm_variant(triton_server))  # a variant id or a Triton name
    report = gate_report_dir / "load-dlrm.json"
    arguments = [
        "-u",
        str(USERS),
        "-r",
        str(USERS),
        "-t",
        f"{SECONDS}s",
        "--host",
        f"http://{triton_server.server.endpoints.http}",
        "--triton-model",
        model.name,
        "--triton-batch-size",
        str(ROWS),
        *WINDOWS,
        *(part for flag, value in TARGETS.items() for part in (flag, value)),
    ]
    locust_gate(LOCUSTFILE, report, arguments, SECONDS + 120)
