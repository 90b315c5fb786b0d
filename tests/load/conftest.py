"""Fixtures of the load tests; how they run Locust is in tests/helpers/locust_runs.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_triton.load.locust.embedded import EmbeddedModel, EmbeddedServer
from pytest_triton.server.launcher import Endpoints
from tests.helpers.probe_models import probe_spec


@pytest.fixture(scope="module")
def probe_server() -> Iterator[Endpoints]:
    """The probe model on a server started by pytest (for runs given --host)."""
    server = EmbeddedServer([EmbeddedModel(probe_spec)], progress=lambda _: None)
    try:
        yield server.start()
    finally:
        server.stop()
