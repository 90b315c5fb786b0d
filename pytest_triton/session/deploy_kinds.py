"""triton-deploy's work for the model kinds beyond a single model: a stateful model
(SequenceSpec) and a pipeline (PipelineSpec). Each is written into a repository directory as
the tests serve it (the sequence batcher's config and its hosted model; each step's model and
the ensemble / BLS front models), and `--check` loads what was written on a local
tritonserver and compares it with PyTorch over HTTP and gRPC: interleaved sequences, every
answer against its own sequence's reference; the pipeline's outputs against its steps
composed in process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import SpecError
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.pipeline import PipelineSpec
from pytest_triton.repository.pipeline_build import PipelineRepository
from pytest_triton.repository.sequence import SequenceSpec
from pytest_triton.repository.sequence_config import write_sequence_model
from pytest_triton.session.lifecycle import start_deployment
from pytest_triton.session.served_pipeline import served_pipeline
from pytest_triton.session.served_sequences import serve_sequence_model

Say = Callable[[str], None]
CHECK_LENGTH = 6
"""Requests of each sequence --check sends (lengths vary by 20%, as perf_analyzer's)."""


def _files(directory: Path, say: Say) -> None:
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        say(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


def write_sequence(spec: SequenceSpec, save_dir: Path, say: Say) -> Path:
    """The stateful model's directory (TorchScript step, hosted model.py, config.pbtxt with
    its sequence_batching), the spec checked first."""
    spec.validate()
    save_dir.mkdir(parents=True, exist_ok=True)
    directory = write_sequence_model(spec, save_dir)
    say(
        f"{spec.model_name}: sequence_batching ({spec.strategy}; control inputs START, END, "
        f"READY, CORRID), {spec.fmt} hosted by the python backend"
    )
    _files(directory, say)
    return directory


def check_sequence(config: TritonConfig, spec: SequenceSpec, save_dir: Path, say: Say) -> None:
    """Serve it from `save_dir` and send interleaved sequences over both protocols; raises
    AssertionError naming the first wrong sequence and step."""
    deployment = start_deployment(config, Repository(save_dir, []))
    try:
        served = serve_sequence_model(deployment, spec)
        count = min(4, spec.sequences_in_flight)
        for protocol in ("http", "grpc"):
            check = served.assert_sequence_parity(protocol, count=count, length=CHECK_LENGTH)
            say(f"check {protocol}: {check.describe()}")
    finally:
        deployment.close()


def write_pipeline(
    spec: PipelineSpec, save_dir: Path, target: ServerTarget, say: Say
) -> PipelineRepository:
    """Every step exported into its own model directory and every front model (ensemble,
    BLS) of the spec's modes, planned for `target`."""
    repo = PipelineRepository.with_pipelines([spec], directory=save_dir, progress=say)
    repo.plan(target)
    if spec.name in repo.unservable:
        raise SpecError(f"pipeline {spec.name!r} cannot be served: {repo.unservable[spec.name]}")
    for step in spec.steps:
        variant = repo.step_variant(spec, step)
        repo.ensure(variant)
        say(f"step {step.name!r}: {variant.model_name} ({spec.step_format_of(step)})")
    for mode in spec.modes:
        name = repo.front_name(spec, mode)
        say(f"{mode}: {name}")
        _files(repo.root / name, say)
    return repo


def check_pipeline(
    config: TritonConfig, spec: PipelineSpec, repo: PipelineRepository, say: Say
) -> None:
    """Serve each front model from the written repository, with its steps, and compare one
    request per protocol with the steps composed in PyTorch; raises AssertionError naming
    the first step whose served output diverges."""
    deployment = start_deployment(config, repo)
    try:
        for mode in spec.modes:
            served = served_pipeline(deployment, spec.name, mode)
            for protocol in ("http", "grpc"):
                report = served.assert_parity(deployment.client(protocol))
                say(f"check {mode} {protocol}: " + report.describe().replace("\n", "\n  "))
    finally:
        deployment.close()
