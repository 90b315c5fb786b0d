"""The external launcher (--triton-url) passes the conformance suite the other launchers
pass, against a tritonserver started outside the run under test, with pytest-xdist: each
worker uploads its models under names of its own, so that one worker's loads, unloads and
statistics (the batching proofs) never touch another's."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import RunningServer

pytestmark = pytest.mark.triton
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """An empty repository in explicit model control: whatever serves comes from uploads."""
    args = ServerArgs(
        tmp_path_factory.mktemp("external-repo"),
        model_control_mode="explicit",
        startup_timeout_s=120,
        extra_args=("--log-info=true",),
    )
    with LocalLauncher().start(args) as server:
        yield server


def test_conformance_suite_with_xdist_workers_on_one_external_server(
    shared_server: RunningServer,
) -> None:
    endpoints = shared_server.endpoints
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            "2",
            "--triton-url",
            f"http://{endpoints.http}",
            "--triton-grpc-url",
            f"grpc://{endpoints.grpc}",
            "tests/models/test_zoo_served.py",
            "-k",
            "mnist or dlrm",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = result.stdout[-3000:]
    assert result.returncode == 0, tail
    assert " passed" in tail and "skipped" not in tail and "failed" not in tail, tail
    loaded = set(re.findall(r"successfully loaded '([^']+)'", shared_server.log_text()))
    workers = {name.rsplit("_", 1)[1] for name in loaded}
    assert workers == {"gw0", "gw1"}, sorted(loaded)
    assert {"mnist_onnx_gw0", "mnist_onnx_gw1"} <= loaded or {
        "dlrm_onnx_gw0",
        "dlrm_onnx_gw1",
    } <= loaded, sorted(loaded)
