"""Fixture factories, so users make their own repository/server/client/model sets in conftest.

    my_repo = factories.repository([spec_a, spec_b])
    my_server = factories.server(repository="my_repo", launcher="local")
    my_client = factories.client(server="my_server")
    my_model = factories.model(server="my_server")

Each fixture names its dependencies in its signature, so pytest sees the whole chain at
collection time; the plugin's pytest_generate_tests then parametrizes client fixtures over
protocols and model fixtures over the variants the server will serve (ids like
`mnist-onnx-hosted-grpc`).
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .client import Protocol, TritonClient
from .config import TritonConfig
from .deployment import Deployment, ServedModel
from .errors import ConfigError
from .launchers.base import ServerArgs
from .launchers.local import REPOSITORY_PREFIX
from .launchers.select import make_launcher
from .repository.builder import Repository
from .repository.spec import ModelSpec

ROLE = "_pytest_triton_role"
SpecSource = Sequence[ModelSpec] | Callable[[TritonConfig], Sequence[ModelSpec]]


@dataclass(frozen=True)
class RepositoryRole:
    specs: SpecSource
    formats: tuple[str, ...] | None

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


@dataclass(frozen=True)
class ModelRole:
    server: str


Role = RepositoryRole | ServerRole | ClientRole | ModelRole


def _make_fixture(func: Callable[..., Any], argnames: Sequence[str], role: Role,
                  scope: str) -> Any:
    """Give `func` a signature naming its dependencies, tag it with its role, make a fixture."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in argnames]
    func.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    setattr(func, ROLE, role)
    return pytest.fixture(scope=scope)(func)  # type: ignore[call-overload]


def role_of(fixture_func: Any) -> Role | None:
    return getattr(fixture_func, ROLE, None)


def repository(specs: SpecSource, *, formats: Sequence[str] | None = None,
               scope: str = "session") -> Any:
    """A model repository of these specs (ModelSpecs, or a callable config -> ModelSpecs).

    It is written to --triton-repository-dir if given (and kept), else to a temporary
    directory removed at teardown. `formats` overrides --triton-formats for these specs.
    """
    role = RepositoryRole(specs, tuple(formats) if formats else None)

    def fixture(request: pytest.FixtureRequest,
                triton_config: TritonConfig) -> Iterator[Repository]:
        config = triton_config
        keep = config.repository_dir is not None
        root = Path(config.repository_dir or tempfile.mkdtemp(
            prefix=f"{REPOSITORY_PREFIX}{os.getpid()}-"))
        try:
            yield Repository(root, role.resolve_specs(config),
                             formats=role.formats or config.formats,
                             progress=_progress_writer(request.config))
        finally:
            if not keep:
                shutil.rmtree(root, ignore_errors=True)

    return _make_fixture(fixture, ["request", "triton_config"], role, scope)


def server(*, repository: str = "triton_repository", scope: str = "session",
           **overrides: Any) -> Any:
    """A started server serving the named repository fixture; stopped at teardown.

    Keyword arguments override any --triton-* setting for this server (e.g. launcher="local",
    executable=..., server_args=("--log-info=true",)).
    """
    role = ServerRole(repository, dict(overrides))

    def fixture(request: pytest.FixtureRequest, triton_config: TritonConfig,
                **deps: Any) -> Iterator[Deployment]:
        repo: Repository = deps[repository]
        config = triton_config.with_overrides(role.overrides)
        deployment = start_deployment(config, repo)
        request.config.stash.setdefault(DEPLOYMENTS, []).append(deployment)
        try:
            yield deployment
        finally:
            deployment.close()

    return _make_fixture(fixture, ["request", "triton_config", repository], role, scope)


def client(*, server: str = "triton_server", protocols: Sequence[str] | None = None,
           scope: str = "function") -> Any:
    """A TritonClient of the named server, parametrized over --triton-protocol (or
    `protocols`)."""
    role = ClientRole(server, tuple(protocols) if protocols else None)

    def fixture(request: pytest.FixtureRequest, **deps: Any) -> TritonClient:
        deployment: Deployment = deps[server]
        protocol: Protocol = getattr(request, "param", None) or "http"
        return deployment.client(protocol)

    return _make_fixture(fixture, ["request", server], role, scope)


def model(*, server: str = "triton_server", scope: str = "function") -> Any:
    """A ServedModel, parametrized over every variant the named server serves."""
    role = ModelRole(server)

    def fixture(request: pytest.FixtureRequest, **deps: Any) -> ServedModel:
        deployment: Deployment = deps[server]
        key = getattr(request, "param", None)
        if key is None:
            raise ConfigError(f"fixture {request.fixturename!r} was not parametrized: request "
                              "it from a test function so pytest-triton can list the variants")
        return deployment.model(key)

    return _make_fixture(fixture, ["request", server], role, scope)


def start_deployment(config: TritonConfig, repo: Repository) -> Deployment:
    """Plan the repository for the launcher's backends and start a server on it."""
    launcher = make_launcher(config)
    repo.plan(launcher.target())
    if config.model_control != "explicit":
        repo.ensure_all()  # none/poll modes load everything present at start
    args = ServerArgs(
        model_repository=repo.root,
        model_control_mode=config.model_control,  # type: ignore[arg-type]
        log_verbose=config.log_verbose,
        startup_timeout_s=config.startup_timeout,
        extra_args=config.server_args,
    )
    return Deployment(launcher.start(args), repo, timeout_s=config.request_timeout)


DEPLOYMENTS = pytest.StashKey[list[Deployment]]()


def _progress_writer(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """Export progress straight to the terminal (not captured): exports can take minutes."""
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def write(message: str) -> None:
        # One line per finished export ("exported x in 3.1s"); -v also shows each start.
        verbose = pytestconfig.getoption("verbose") > 0
        if reporter is not None and (verbose or not message.startswith("exporting ")):
            reporter.write_line(f"[pytest-triton] {message}")

    return write
