"""pytest entry point: options, markers, default fixtures, parametrization, failure reports.

Never imports locust (it monkey-patches the whole process with gevent).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest

from pytest_triton.base.config import Setting, TritonConfig, settings_for
from pytest_triton.base.config_resolution import check_replicas_behind, resolve
from pytest_triton.base.errors import ConfigError, ParityNotApplicable, TritonTestError
from pytest_triton.base.importing import load_object
from pytest_triton.base.setting_sources import Source, check_environ, join_dash_values
from pytest_triton.client.wire.shm import ID_SUFFIX, cuda_problem
from pytest_triton.plugin import factories, gate_report, step_report
from pytest_triton.plugin.fixture_lookup import visible_fixture
from pytest_triton.repository.spec import ModelSpec
from pytest_triton.repository.variants import plan_variants
from pytest_triton.server.launcher import LIVE_SERVERS, RunningServer
from pytest_triton.session.lifecycle import launcher_for, server_target

CONFIG = pytest.StashKey[TritonConfig]()
SERVERS_BEFORE = pytest.StashKey[frozenset[RunningServer]]()  # live when a session began
# The plugin's own markers, registered in every session that loads it; the project's suite
# registers its own (container, load, slow, reliability) in pyproject.toml.
MARKERS = {
    "triton": "uses a Triton server started by pytest-triton",
    "gpu": "needs --triton-gpu (an NVIDIA GPU; skipped without it)",
}


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()  # an ini key nobody set (pytest's own default would be "")


def accept_dash_values(parser: pytest.Parser) -> None:
    """`--triton-server-args "--repository-poll-secs=1"` as the docs write it: pytest's
    argparse would read the value as another option, so this parser joins such a value to
    its flag before each of its parses (this parser only; nothing else of pytest changes)."""
    for name in ("parse", "parse_known_and_unknown_args"):
        original = getattr(parser, name, None)
        if original is None or getattr(original, "joins_dash_values", False):
            continue

        def joined(args: Any, *rest: Any, _original: Any = original, **named: Any) -> Any:
            return _original(join_dash_values([os.fspath(a) for a in args]), *rest, **named)

        joined.joins_dash_values = True  # type: ignore[attr-defined]
        setattr(parser, name, joined)


def pytest_addoption(parser: pytest.Parser) -> None:
    accept_dash_values(parser)
    group = parser.getgroup("triton", "pytest-triton: serve PyTorch models on Triton")
    for setting in settings_for("pytest"):
        text = setting.describe()
        if setting.flag:
            group.addoption(
                setting.cli,
                dest=setting.dest,
                action="store_const",
                const="true",
                default=None,
                help=text,
            )
        else:
            group.addoption(
                setting.cli,
                dest=setting.dest,
                default=None,
                help=text,
                metavar=setting.metavar,
                choices=setting.choices,
            )
        parser.addini(setting.ini, text, type="string", default=UNSET)


def sources(pytestconfig: pytest.Config) -> list[Source]:
    """The command line, then the ini file."""

    def cli(setting: Setting) -> tuple[Any, str] | None:
        if "pytest" not in setting.fronts:
            return None
        value = pytestconfig.getoption(setting.dest, default=None)
        return None if value is None else (value, f"command line {setting.cli}")

    def ini(setting: Setting) -> tuple[Any, str] | None:
        if "pytest" not in setting.fronts:
            return None
        value = pytestconfig.getini(setting.ini)
        return None if value is UNSET else (value, f"ini {setting.ini}")

    return [cli, ini]


@pytest.hookimpl(tryfirst=True)  # before junitxml reads --junitxml (the report points it)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[SERVERS_BEFORE] = LIVE_SERVERS.started()
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    try:
        check_environ(os.environ, "pytest")
        triton = config.stash[CONFIG] = resolve(*sources(config))
        check_replicas_behind(triton, triton.server.url, "--triton-url")
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-triton: {exc}") from None
    if triton.gate.report and hasattr(config.option, "xmlpath") and not config.option.xmlpath:
        config.option.xmlpath = gate_report.junit_path(triton)  # unless -p no:junitxml
    config.pluginmanager.register(gate_report.GateReporter(config, triton), "pytest-triton-gate")
    step_report.register(config)


def pytest_sessionstart(session: pytest.Session) -> None:
    """With --triton-gpu, choose the launcher and check what it needs now: a GPU run that
    cannot happen stops the session at once, naming what is missing."""
    triton = session.config.stash[CONFIG]
    if triton.server.gpu:
        try:
            launcher_for(triton)
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-triton --triton-gpu: {exc}") from None
    if "cuda" in triton.client.shared_memory:
        problem = cuda_problem()  # what the server offers is checked when a client is made
        if problem is not None:
            raise pytest.UsageError(f"pytest-triton --triton-shared-memory cuda: {problem}")


def pytest_report_header(config: pytest.Config) -> list[str]:
    triton = config.stash.get(CONFIG, None)
    if triton is None:
        return []
    launcher: str = triton.server.launcher
    if triton.server.gpu:
        with contextlib.suppress(ConfigError):  # sessionstart reports it
            launcher = launcher_for(triton).name
    gpu = (
        f", gpu {triton.server.gpus}, {triton.server.numerics} numerics"
        if triton.server.gpu
        else ""
    )
    shm = (
        f", shared memory={','.join(triton.client.shared_memory)}"
        if triton.client.shared_memory != ("none",)
        else ""
    )
    return [
        f"triton: launcher={launcher}, protocols={','.join(triton.client.protocols)}, "
        f"formats={','.join(triton.serving.formats)}{gpu}{shm}"
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.stash[CONFIG].server.gpu:
        return
    skip = pytest.mark.skip(
        reason="GPU test: run with --triton-gpu on a machine with an NVIDIA GPU (docs/gpu.md)"
    )
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


# -- parametrization ---------------------------------------------------------------------
Roles = Callable[[str], "factories.Role | None"]
"""The pytest-triton role of the fixture a name resolves to for one test (None: another)."""


def _roles(metafunc: pytest.Metafunc) -> Roles:
    """Fixtures by name as this test sees them, by pytest's own lookup (a nearer definition
    of a name overrides a farther one); a name may be one a fixture asks for only when it
    runs (`request.getfixturevalue`)."""

    def role(name: str) -> factories.Role | None:
        found = visible_fixture(metafunc.definition, name)
        return None if found is None else factories.role_of(found)

    return role


def _server_config(
    roles: Roles, base: TritonConfig, server: str
) -> tuple[TritonConfig, factories.ServerRole]:
    role = roles(server)
    if not isinstance(role, factories.ServerRole):
        raise ConfigError(
            f"fixture {server!r} is not a pytest-triton server fixture "
            "(make it with factories.server())"
        )
    return base.with_overrides(role.overrides), role


def variant_params(roles: Roles, base: TritonConfig, server: str) -> list[Any]:
    """One pytest.param per variant; those the server cannot serve are skipped with why."""
    config, server_role = _server_config(roles, base, server)
    repo_role = roles(server_role.repository)
    if not isinstance(repo_role, factories.RepositoryRole):
        raise ConfigError(
            f"fixture {server_role.repository!r} is not a pytest-triton "
            "repository fixture (make it with factories.repository())"
        )
    specs = repo_role.resolve_specs(config)
    if not specs:
        raise ConfigError(
            f"no models in repository fixture {server_role.repository!r}: define it in "
            "conftest.py with factories.repository([ModelSpec(...)]) or set --triton-specs "
            "MODULE:CALLABLE"
        )
    plan = plan_variants(
        specs,
        repo_role.formats or config.serving.formats,
        server_target(config),
        precisions=config.serving.precisions,
    )
    return [pytest.param(v.id, id=v.id) for v in plan.variants] + [
        pytest.param(u.id, id=u.id, marks=pytest.mark.skip(reason=u.reason))
        for u in plan.unavailable
    ]


def client_params(roles: Roles, base: TritonConfig, role: factories.ClientRole) -> list[Any]:
    """(protocol, transport) pairs: ids `http`, `grpc` without shared memory (as ever),
    `http-shm`, `grpc-cuda-shm` with it."""
    server_config = _server_config(roles, base, role.server)[0]
    protocols: Sequence[str] = role.protocols or server_config.client.protocols
    transports: Sequence[str] = role.shared_memory or server_config.client.shared_memory
    return [pytest.param((p, t), id=p + ID_SUFFIX[t]) for t in transports for p in protocols]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    roles = _roles(metafunc)
    base = metafunc.config.stash[CONFIG]
    for name in metafunc.fixturenames:
        role = roles(name)
        try:
            if isinstance(role, factories.ClientRole):
                metafunc.parametrize(name, client_params(roles, base, role), indirect=True)
            elif isinstance(role, factories.ModelRole):
                metafunc.parametrize(name, variant_params(roles, base, role.server), indirect=True)
        except TritonTestError as exc:
            pytest.fail(f"pytest-triton: {exc}", pytrace=False)


# -- default fixtures ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def triton_config(pytestconfig: pytest.Config) -> TritonConfig:
    """The resolved pytest-triton settings of this session."""
    return pytestconfig.stash[CONFIG]


@functools.cache
def _specs_target(reference: str) -> Any:
    return load_object(reference, default_attr="specs")


def specs_from_config(config: TritonConfig) -> list[ModelSpec]:
    """Specs named by --triton-specs MODULE:CALLABLE (none by default)."""
    if not config.serving.specs:
        return []
    try:
        target = _specs_target(config.serving.specs)
    except ConfigError as exc:
        raise ConfigError(f"--triton-specs: {exc}") from None
    return list(target() if callable(target) else target)


triton_repository = factories.repository(specs_from_config)
triton_server = factories.server()
triton_client = factories.client()
triton_model = factories.model()


# -- reporting -----------------------------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A parity check of an int8 variant is skipped with why, not failed: such a variant is
    judged by accuracy (ServedModel.assert_accuracy)."""
    try:
        return (yield)
    except ParityNotApplicable as exc:
        pytest.skip(str(exc))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for deployment in item.config.stash.get(factories.DEPLOYMENTS, []):
        if any(deployment.owns(value) for value in getattr(item, "funcargs", {}).values()):
            server = deployment.server
            report.sections.append(
                (
                    f"tritonserver log ({server.launcher}, {server.endpoints.http})",
                    server.log_tail(80),
                )
            )


def pytest_unconfigure(config: pytest.Config) -> None:
    """Last line of defence: stop any server of this session a fixture's teardown did not
    reach (not those of a session this one runs inside: pytester's in-process runs)."""
    LIVE_SERVERS.stop_all(keep=config.stash.get(SERVERS_BEFORE, frozenset()))
    step_report.unregister(config)
