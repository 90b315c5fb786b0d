"""The external launcher (--triton-url) passes the conformance suite the other launchers
pass, against tritonservers started outside the run under test:

- uploading (explicit model control) with pytest-xdist: each worker uploads its models under
  names of its own, so that one worker's loads, unloads and statistics (the batching proofs)
  never touch another's;
- deployed (--triton-deployed, model control none): the server serves the zoo models it was
  started with, and the same parity and batching proofs pass against them as served."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_triton.base.formats import FORMATS
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.models import zoo_spec
from pytest_triton.repository.builder import Repository
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import RunningServer
from tests.conftest import PROVABLE
from tests.helpers.session_output import failure_text

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


def conformance_suite(server: RunningServer, *args: str) -> str:
    """tests/models/test_zoo_served.py against `server`; its output's tail, once it passed
    with nothing skipped."""
    endpoints = server.endpoints
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--triton-url",
            f"http://{endpoints.http}",
            "--triton-grpc-url",
            f"grpc://{endpoints.grpc}",
            "tests/models/test_zoo_served.py",
            *args,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = result.stdout[-3000:]
    assert result.returncode == 0, failure_text(result.stdout)
    assert " passed" in tail and "skipped" not in tail and "failed" not in tail, tail
    return tail


def test_conformance_suite_with_xdist_workers_on_one_external_server(
    shared_server: RunningServer,
) -> None:
    # Each worker runs DLRM's 18 tests (--dist each), so both upload and measure the same
    # models at once, each under its own names. DLRM only: the zoo serves MNIST with five CPU
    # instances a format, 12 core-s more of this test for no further proof.
    conformance_suite(shared_server, "-n", "2", "--dist", "each", "-k", "dlrm")
    loaded = set(re.findall(r"successfully loaded '([^']+)'", shared_server.log_text()))
    expected = {f"dlrm_{fmt.replace('-', '_')}_gw{i}" for fmt in FORMATS for i in (0, 1)}
    assert loaded == expected, sorted(loaded)


DEPLOYED = ("mnist", "dlrm")


@pytest.fixture(scope="module")
def deployed_zoo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """MNIST and DLRM as a staging server runs them: exported once (ONNX, the suite's serving
    settings), under their own names, loaded at start (model control none)."""
    root = tmp_path_factory.mktemp("deployed-zoo")
    specs = [
        dataclasses.replace(
            zoo_spec(name, instance_count=1, dynamic_batching=PROVABLE),
            formats=("onnx",),
            triton_name=name,
        )
        for name in DEPLOYED
    ]
    repo = Repository(root, specs)
    repo.plan(ServerTarget())
    repo.ensure_all()
    args = ServerArgs(root, model_control_mode="none", startup_timeout_s=180)
    with LocalLauncher().start(args) as server:
        yield server


def test_conformance_suite_in_deployed_mode(deployed_zoo: RunningServer) -> None:
    """Parity and batching proofs against the served models (the bad-request tests upload a
    model of their own, which deployed mode never does)."""
    tail = conformance_suite(
        deployed_zoo,
        "--triton-deployed",
        "--triton-formats",
        "onnx",
        "-k",
        "(mnist or dlrm) and (parity or batched)",
    )
    assert "12 passed" in tail, tail
