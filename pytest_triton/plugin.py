"""pytest entry point: options, markers, default fixtures, parametrization, failure reports.

Never imports locust (it monkey-patches the whole process with gevent).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Generator, Sequence
from typing import Any

import pytest

from . import factories
from .config import UNSET, TritonConfig, resolve
from .errors import ConfigError, TritonTestError
from .launchers.base import LIVE_SERVERS
from .launchers.select import make_launcher
from .options import OPTIONS
from .repository.spec import ModelSpec
from .repository.variants import ServerTarget, plan_variants

CONFIG = pytest.StashKey[TritonConfig]()
MARKERS = {
    "triton": "uses a Triton server started by pytest-triton",
    "gpu": "needs --triton-gpu (an NVIDIA GPU and Docker with the nvidia runtime)",
    "container": "needs a Docker engine and the offline CPU image (docker/build-cpu-image)",
    "load": "a load test: runs Locust in a subprocess for tens of seconds",
    "slow": "full-size models; minutes on a CPU",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("triton", "pytest-triton: serve PyTorch models on Triton")
    for option in OPTIONS:
        text = f"{option.help} (default: {option.default_text})"
        if option.flag:
            group.addoption(option.cli, dest=option.dest, action="store_const", const="true",
                            default=None, help=text)
        else:
            group.addoption(option.cli, dest=option.dest, default=None, help=text,
                            metavar=option.metavar, choices=option.choices)
        parser.addini(option.ini, text, type="string", default=UNSET)


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    try:
        config.stash[CONFIG] = resolve(config)
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-triton: {exc}") from None


def pytest_sessionstart(session: pytest.Session) -> None:
    triton = session.config.stash[CONFIG]
    if triton.gpu:
        from .launchers.gpu import preflight

        try:
            preflight(triton)
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-triton --triton-gpu: {exc}") from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    triton = config.stash.get(CONFIG, None)
    if triton is None:
        return []
    return [f"triton: launcher={triton.launcher}, protocols={','.join(triton.protocols)}, "
            f"formats={','.join(triton.formats)}" + (", gpu" if triton.gpu else "")]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.stash[CONFIG].gpu:
        return
    skip = pytest.mark.skip(reason="GPU test: run with --triton-gpu on a machine with an NVIDIA "
                                   "GPU and Docker's nvidia runtime")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


# -- parametrization ---------------------------------------------------------------------
def _role(metafunc: pytest.Metafunc, name: str) -> Any:
    # pytest has no public API to read a fixture's definition at collection time.
    defs = metafunc._arg2fixturedefs.get(name)
    return factories.role_of(defs[-1].func) if defs else None


def _server_config(metafunc: pytest.Metafunc, server: str) -> tuple[TritonConfig, Any]:
    role = _role(metafunc, server)
    if not isinstance(role, factories.ServerRole):
        raise ConfigError(f"fixture {server!r} is not a pytest-triton server fixture "
                          "(make it with factories.server())")
    config = metafunc.config.stash[CONFIG].with_overrides(role.overrides)
    return config, role


def variant_params(metafunc: pytest.Metafunc, server: str) -> list[Any]:
    """One pytest.param per variant; those the server cannot serve are skipped with why."""
    config, server_role = _server_config(metafunc, server)
    repo_role = _role(metafunc, server_role.repository)
    if not isinstance(repo_role, factories.RepositoryRole):
        raise ConfigError(f"fixture {server_role.repository!r} is not a pytest-triton "
                          "repository fixture (make it with factories.repository())")
    specs = repo_role.resolve_specs(config)
    if not specs:
        raise ConfigError(
            f"no models in repository fixture {server_role.repository!r}: define it in "
            "conftest.py with factories.repository([ModelSpec(...)]) or set --triton-specs "
            "MODULE:CALLABLE")
    plan = plan_variants(specs, repo_role.formats or config.formats, _target(config))
    return [pytest.param(v.id, id=v.id) for v in plan.variants] + [
        pytest.param(u.id, id=u.id, marks=pytest.mark.skip(reason=u.reason))
        for u in plan.unavailable]


@functools.lru_cache(maxsize=16)
def _target(config: TritonConfig) -> ServerTarget:
    """Asked once per distinct server config: for GPU containers it runs the image."""
    return make_launcher(config).target()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in metafunc.fixturenames:
        role = _role(metafunc, name)
        try:
            if isinstance(role, factories.ClientRole):
                protocols: Sequence[str] = (role.protocols or
                                            _server_config(metafunc, role.server)[0].protocols)
                metafunc.parametrize(name, list(protocols), indirect=True, ids=list(protocols))
            elif isinstance(role, factories.ModelRole):
                metafunc.parametrize(name, variant_params(metafunc, role.server),
                                     indirect=True)
        except TritonTestError as exc:
            pytest.fail(f"pytest-triton: {exc}", pytrace=False)


# -- default fixtures ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def triton_config(pytestconfig: pytest.Config) -> TritonConfig:
    """The resolved pytest-triton settings of this session."""
    return pytestconfig.stash[CONFIG]


def specs_from_config(config: TritonConfig) -> list[ModelSpec]:
    """Specs named by --triton-specs MODULE:CALLABLE (none by default)."""
    if not config.specs:
        return []
    module_name, _, attr = config.specs.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr or "specs")
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--triton-specs {config.specs!r}: {exc}") from None
    return list(target() if callable(target) else target)


triton_repository = factories.repository(specs_from_config)
triton_server = factories.server()
triton_client = factories.client()
triton_model = factories.model()


# -- reporting -----------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for deployment in item.config.stash.get(factories.DEPLOYMENTS, []):
        if any(deployment.owns(value) for value in getattr(item, "funcargs", {}).values()):
            server = deployment.server
            report.sections.append(
                (f"tritonserver log ({server.launcher}, {server.endpoints.http})",
                 server.log_tail(80)))



def pytest_unconfigure(config: pytest.Config) -> None:
    """Last line of defence: stop any server a fixture's teardown did not reach."""
    LIVE_SERVERS.stop_all()
