"""Fixture factories, so users make their own repository/server/client/model sets in conftest.

    my_repo = factories.repository([spec_a, spec_b])
    my_server = factories.server(repository="my_repo", launcher="local")
    my_client = factories.client(server="my_server")
    my_model = factories.model(server="my_server")
    my_pipeline = factories.pipeline("classify", server="my_server")  # pipelines=[...] above
    my_gru = factories.sequence_model(gru_spec, server="my_server")   # a stateful model

Each fixture names the fixture it builds on and asks pytest for it when it runs
(`request.getfixturevalue`). The role each factory gives its fixture lets the plugin's
pytest_generate_tests parametrize client fixtures over protocols and model fixtures over the
variants the server will serve (ids like `mnist-onnx-hosted-grpc`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_triton.base.config import TritonConfig, check_names
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_parsers import parse_shared_memory
from pytest_triton.client.triton_client import Protocol, Transport, TritonClient
from pytest_triton.plugin import gate_report, step_report
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.pipeline import PipelineSpec
from pytest_triton.repository.pipeline_build import PipelineRepository
from pytest_triton.repository.sequence import SequenceSpec
from pytest_triton.repository.spec import ModelSpec
from pytest_triton.session.deployment import Deployment, ServedModel
from pytest_triton.session.lifecycle import start_deployment
from pytest_triton.session.served_pipeline import ServedPipeline, served_pipeline
from pytest_triton.session.served_sequences import ServedSequenceModel, serve_sequence_model

ROLE = "_pytest_triton_role"
SpecSource = Sequence[ModelSpec] | Callable[[TritonConfig], Sequence[ModelSpec]]
DEPLOYMENTS = pytest.StashKey[list[Deployment]]()


@dataclass(frozen=True)
class RepositoryRole:
    specs: SpecSource
    formats: tuple[str, ...] | None
    pipelines: tuple[PipelineSpec, ...] = ()

    def resolve_specs(self, config: TritonConfig) -> list[ModelSpec]:
        return list(self.specs(config) if callable(self.specs) else self.specs)


@dataclass(frozen=True)
class ServerRole:
    repository: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientRole:
    server: str
    protocols: tuple[str, ...] | None
    shared_memory: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ModelRole:
    server: str


Role = RepositoryRole | ServerRole | ClientRole | ModelRole


def _fixture(func: Callable[..., Any], role: Role, scope: str) -> Any:
    setattr(func, ROLE, role)  # what pytest's lookup finds (plugin/fixture_lookup.py)
    fixture = pytest.fixture(scope=scope)(func)  # type: ignore[call-overload]
    return fixture


def role_of(value: Any) -> Role | None:
    return getattr(value, ROLE, None)


def repository(
    specs: SpecSource,
    *,
    formats: Sequence[str] | None = None,
    scope: str = "session",
    pipelines: Sequence[PipelineSpec] = (),
) -> Any:
    """A model repository of these specs (ModelSpecs, or a callable config -> ModelSpecs),
    and of `pipelines` (each one's steps, ensemble and BLS models; see factories.pipeline).

    It is written to --triton-repository-dir if given (and kept), else to a temporary
    directory removed at teardown. `formats` overrides --triton-formats for these specs.
    """
    role = RepositoryRole(specs, tuple(formats) if formats else None, tuple(pipelines))

    def fixture(
        request: pytest.FixtureRequest, triton_config: TritonConfig
    ) -> Iterator[Repository]:
        make = (
            functools.partial(PipelineRepository.with_pipelines, role.pipelines)
            if role.pipelines
            else Repository.create
        )
        repo = make(
            role.resolve_specs(triton_config),
            triton_config.serving.repository_dir,
            formats=role.formats or triton_config.serving.formats,
            progress=step_report.say,
            precisions=triton_config.serving.precisions,
            warmup=triton_config.serving.warmup,
        )
        try:
            yield repo
        finally:
            repo.remove()

    return _fixture(fixture, role, scope)


def server(
    *, repository: str = "triton_repository", scope: str = "session", **overrides: Any
) -> Any:
    """A started server serving the named repository fixture; stopped at teardown.

    Keyword arguments override any --triton-* setting for this server (e.g. launcher="local",
    executable=..., server_args=("--log-info=true",)).
    """
    check_names(overrides)
    role = ServerRole(repository, dict(overrides))

    def fixture(
        request: pytest.FixtureRequest, triton_config: TritonConfig
    ) -> Iterator[Deployment]:
        repo: Repository = request.getfixturevalue(role.repository)
        config = triton_config.with_overrides(role.overrides)
        started = time.perf_counter()
        deployment = start_deployment(config, repo)
        step_report.say(
            f"{request.fixturename}: {config.server.launcher} server ready in "
            f"{time.perf_counter() - started:.1f}s"
        )
        request.config.stash.setdefault(DEPLOYMENTS, []).append(deployment)
        deployment.listeners.append(functools.partial(gate_report.record_result, request.config))
        gate_report.record_server(request.config, deployment)
        try:
            yield deployment
        finally:
            started = time.perf_counter()
            deployment.close()
            stopped_in = time.perf_counter() - started
            step_report.say(f"{request.fixturename}: stopped in {stopped_in:.1f}s")

    return _fixture(fixture, role, scope)


def client(
    *,
    server: str = "triton_server",
    protocols: Sequence[str] | None = None,
    shared_memory: Sequence[str] | None = None,
    scope: str = "function",
) -> Any:
    """A TritonClient of the named server, parametrized over --triton-protocol (or
    `protocols`) times --triton-shared-memory (or `shared_memory`: none, system, cuda)."""
    if shared_memory is not None:
        shared_memory = parse_shared_memory(",".join(shared_memory))
    role = ClientRole(
        server,
        tuple(protocols) if protocols else None,
        tuple(shared_memory) if shared_memory else None,
    )

    def fixture(request: pytest.FixtureRequest) -> TritonClient:
        deployment: Deployment = request.getfixturevalue(role.server)
        param: Any = getattr(request, "param", None) or ("http", "none")
        if isinstance(param, str):  # a bare protocol, from a user's own parametrize
            param = (param, "none")
        protocol: Protocol
        transport: Transport
        protocol, transport = param
        return deployment.client(protocol, transport)

    return _fixture(fixture, role, scope)


def model(*, server: str = "triton_server", scope: str = "function") -> Any:
    """A ServedModel, parametrized over every variant the named server serves."""
    role = ModelRole(server)

    def fixture(request: pytest.FixtureRequest) -> ServedModel:
        key = getattr(request, "param", None)
        if key is None:
            raise ConfigError(
                f"fixture {request.fixturename!r} was not parametrized: request "
                "it from a test function so pytest-triton can list the variants"
            )
        deployment: Deployment = request.getfixturevalue(role.server)
        return deployment.model(key)

    return _fixture(fixture, role, scope)


def pipeline(
    name: str, *, server: str = "triton_server", mode: str = "ensemble", scope: str = "function"
) -> Any:
    """The pipeline `name` of the named server's repository as a ServedPipeline, served in
    `mode` (ensemble, bls, bls-async); parametrize it indirectly to run a test in each mode."""

    def fixture(request: pytest.FixtureRequest) -> ServedPipeline:
        deployment: Deployment = request.getfixturevalue(server)
        unservable = getattr(deployment.repository, "unservable", {}).get(name)
        if unservable is not None:
            pytest.skip(unservable)
        return served_pipeline(deployment, name, getattr(request, "param", None) or mode)

    fixture_function: Any = pytest.fixture(scope=scope)(fixture)  # type: ignore[call-overload]
    return fixture_function


def sequence_model(
    spec: SequenceSpec, *, server: str = "triton_server", scope: str = "session"
) -> Any:
    """A stateful model (SequenceSpec) exported, written and loaded on the named server
    fixture: a ServedSequenceModel whose `assert_sequence_parity` and `run` send sequences."""

    def fixture(request: pytest.FixtureRequest) -> ServedSequenceModel:
        deployment: Deployment = request.getfixturevalue(server)
        return serve_sequence_model(deployment, spec)

    return pytest.fixture(scope=scope)(fixture)  # type: ignore[call-overload]
