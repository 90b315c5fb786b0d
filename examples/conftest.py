"""A release gate as a user writes one: the example models (small configurations), exported
and served by the embedded local Triton on CPU, checked against PyTorch."""

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from pytest_triton import ModelSpec, TritonConfig, factories
from pytest_triton.base.formats import PT2_FORMATS
from pytest_triton.base.setting_sources import foreign_variables
from pytest_triton.models import ZOO, zoo_spec
from pytest_triton.models.pipelines import mnist_pipeline

PT2_MODEL = "dlrm"  # PyTorch 2's formats for one model: an AOTInductor compile is ~40 s


def gate_specs(config: TritonConfig) -> list[ModelSpec]:
    """One instance per model: the examples' counts (5 MNIST, 2 text-recognition) are for
    their hardware, and every instance of a python-hosted model is a process of its own.
    DLRM is also served as torch.export's program and as an AOTInductor package, beside the
    session's formats: TorchScript is deprecated, and whether PyTorch's own deployment path
    answers like eager is part of the release."""
    formats = config.serving.formats
    if config.server.deployed:  # a deployed server serves one format a model, its own
        return [zoo_spec(name, instance_count=1) for name in ZOO]
    pt2 = [*formats, *(f for f in PT2_FORMATS if f not in formats)]
    return [
        zoo_spec(name, instance_count=1, formats=pt2 if name == PT2_MODEL else None) for name in ZOO
    ]


# ... and MNIST with its pre- and post-processing as a pipeline (ensemble and BLS models).
triton_repository = factories.repository(gate_specs, pipelines=[mnist_pipeline()])
digits = factories.pipeline("mnist_pipeline")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tune gate", "the triton-tune gate (examples/test_tune_gate.py)")
    group.addoption(
        "--tune-gate",
        action="store_true",
        help="also run the tuning gate: a triton-tune search on this session's server (minutes)",
    )
    group.addoption("--tune-budget", default="600", help="its time budget in seconds")
    group.addoption(
        "--tune-within",
        default="10",
        help="the share (percent) the committed config may fall short of the best",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "tune: the tuning gate; runs only with --tune-gate")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tuning gate is opt-in: it takes minutes, the rest of the gate seconds."""
    if config.getoption("tune_gate"):
        return
    skip = pytest.mark.skip(reason="the tuning gate takes minutes: run it with --tune-gate")
    for item in items:
        if item.get_closest_marker("tune"):
            item.add_marker(skip)


VERDICT = "Verdict (pytest-triton targets)"
LocustGate = Callable[[Path, Path, Sequence[str], float], None]  # the locust_gate fixture


@pytest.fixture
def gate_report_dir(triton_config: TritonConfig, tmp_path: Path) -> Path:
    """Where a load gate writes its `load-*.json`: the --triton-report directory (so it joins
    the gate report), else the test's own temporary one."""
    out = Path(triton_config.gate.report) if triton_config.gate.report else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def locust_gate() -> LocustGate:
    """Runs a locustfile headless in a subprocess (importing locust would patch pytest's
    process with gevent) and fails the test unless it passed its targets and wrote its
    verdict file: `run(locustfile, report, arguments, timeout_s)`."""

    def run(locustfile: Path, report: Path, arguments: Sequence[str], timeout_s: float) -> None:
        report.unlink(missing_ok=True)  # never let an earlier run's verdict stand in for this one
        command = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless"]
        command += ["--only-summary", *arguments, "--triton-report-json", str(report)]
        # Not this session's targets, nor variables of settings Locust does not take (which it
        # refuses: TRITON_MAX_TRIALS set for the tune gate of the same session)
        foreign = {name for name, _ in foreign_variables(os.environ, "locust")}
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TRITON_PERF_") and k not in foreign
        }
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        output = (done.stdout + done.stderr).strip()
        verdict = output[output.rfind(VERDICT) :] if VERDICT in output else output[-3000:]
        print(verdict)
        assert done.returncode == 0, f"locust exited {done.returncode}:\n{verdict}"
        assert report.exists(), f"locust wrote no verdict file:\n{output[-3000:]}"

    return run
