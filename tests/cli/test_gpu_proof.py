"""`make gpu-proof` (benchmarks/gpu_proof.py) on this machine: the steps it would run on a GPU,
a run here that skips every step naming the missing GPU yet still leaves its two files, and
a step that outlives its timeout stopped with everything it started."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from pytest_triton.server import gpu

REPO = Path(__file__).resolve().parents[2]
NO_GPU = pytest.mark.skipif(
    gpu.visible_gpus().count > 0, reason="this machine has a GPU: there the proof runs for real"
)


@pytest.fixture(scope="module")
def proof() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_proof", REPO / "benchmarks/gpu_proof.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_steps_are_the_issues_proof_within_eight_minutes(proof: ModuleType) -> None:
    steps = {s.name: s for s in proof.steps("python3")}
    assert list(steps) == [
        "examples-fp32",
        "examples-fp16",
        "gpu-tests",
        "locust-gpu",
        "serving-overhead",
        "tune-gpu",
    ]
    line = {name: " ".join(s.command(Path("/o"))) for name, s in steps.items()}
    assert all("--triton-gpu" in line[n] for n in steps if n != "serving-overhead")
    assert "--device cuda" in line["serving-overhead"]
    assert (
        "examples" in line["examples-fp32"] and "--triton-precisions" not in line["examples-fp32"]
    )
    assert "--triton-precisions fp16 --triton-numerics production" in line["examples-fp16"]
    assert "tests/models/test_gpu_served.py" in line["gpu-tests"]
    assert "locustfiles/dlrm.py --headless" in line["locust-gpu"] and "-t 20s" in line["locust-gpu"]
    assert "--time-budget 60s" in line["tune-gpu"]
    assert "--junitxml=/o/examples-fp32.xml" in line["examples-fp32"]
    assert proof.BUDGET_S < 8 * 60


def test_dry_run_prints_every_step(proof: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert proof.main(["--dry-run", "--only", "locust-gpu,tune-gpu"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [p.split(" ")[0] for p in printed] == ["locust-gpu", "tune-gpu"]
    with pytest.raises(SystemExit):
        proof.main(["--dry-run", "--only", "nonsense"])


@NO_GPU
def test_without_a_gpu_every_step_skips_naming_it_and_two_files_remain(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_proof.py", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "every step skipped: --triton-gpu needs an NVIDIA GPU" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "gpu-proof-summary.md",
        "gpu-proof.tar.gz",
    ]
    summary = (tmp_path / "gpu-proof-summary.md").read_text()
    assert "| examples-fp32 | skipped | 0 |" in summary and "| tune-gpu | skipped | 0 |" in summary
    with tarfile.open(tmp_path / "gpu-proof.tar.gz") as tar:
        assert "gpu-proof/gpu-proof-summary.md" in tar.getnames()


def test_a_step_past_its_timeout_is_stopped_with_its_children(
    proof: ModuleType, tmp_path: Path
) -> None:
    child = "import subprocess, sys, time; print(subprocess.Popen([sys.executable, '-c', "
    child += "'import time; time.sleep(60)']).pid, flush=True); time.sleep(60)"
    step = proof.Step("sleeper", "a step that never ends", (sys.executable, "-c", child), 60)
    started = time.monotonic()
    outcome = proof.run_step(step, tmp_path, timeout_s=3)
    assert outcome.status == "timed out"
    assert time.monotonic() - started < 30
    log = (tmp_path / "sleeper" / "log.txt").read_text()
    try:
        grandchild = psutil.Process(int(log.splitlines()[1]))
    except psutil.NoSuchProcess:
        grandchild = None  # gone already
    if grandchild is not None:
        _, alive = psutil.wait_procs([grandchild], timeout=10)  # SIGKILL takes a moment
        for proc in alive:
            proc.kill()  # nothing left behind, then fail
        assert alive == [], "the step's child outlived its timeout"
    ok = proof.Step("ok", "a step that passes", (sys.executable, "-c", "print('1 passed')"), 60)
    assert proof.run_step(ok, tmp_path, timeout_s=30).status == "passed"
