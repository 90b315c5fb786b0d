"""Fixtures of the load tests; how they run Locust is in tests/helpers/locust_runs.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_triton.load.runner.embedded import EmbeddedModel, EmbeddedServer
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.server.launcher import Endpoints
from tests.helpers.probe_models import probe_spec, write_sleepy


@pytest.fixture(scope="module")
def probe_server() -> Iterator[Endpoints]:
    """The probe model on a server started by pytest (for runs given --host)."""
    server = EmbeddedServer([EmbeddedModel(probe_spec)], progress=lambda _: None)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sleepy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    """`sleepy` (20 ms a request, one instance, no batching: the probe's signature) on a
    server started by pytest (for runs given --host)."""
    root = tmp_path_factory.mktemp("repo")
    write_sleepy(root, "sleepy")
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as server:
        yield server.endpoints
