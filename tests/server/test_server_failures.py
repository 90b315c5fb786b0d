"""A server that crashes mid-session and a model that fails to load: clear errors, no hangs."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_triton import ModelLoadError, Repository, ServerError, TritonClient
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.processes import group_members
from pytest_triton.session.deployment import Deployment
from pytest_triton.session.lifecycle import start_deployment
from tests.helpers.tiny_models import scorer_spec

pytestmark = pytest.mark.triton


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    specs = [
        scorer_spec(formats=["torchscript-trace"]),
        # A config parameter the hosted model cannot parse: initialize() raises.
        scorer_spec(
            "broken", formats=["torchscript-trace"], parameters={"intra_op_threads": "many"}
        ),
    ]
    deployment = start_deployment(resolve(protocol="http"), Repository(tmp_path, specs))
    yield deployment
    deployment.close()


def test_model_that_fails_to_load_names_model_and_reason(deployment: Deployment) -> None:
    with pytest.raises(ModelLoadError) as info:
        deployment.model("broken_torchscript_trace")
    assert info.value.model == "broken_torchscript_trace"
    assert "invalid literal for int() with base 10: 'many'" in info.value.reason
    assert "--- tritonserver log (tail) ---" in str(info.value)
    # One broken model fails only its own tests: the server and the other model carry on.
    good = deployment.model("scorer_torchscript_trace")
    good.assert_parity(deployment.client("grpc"))


def test_crashed_server_is_reported_not_a_connection_error(deployment: Deployment) -> None:
    model = deployment.model("scorer_torchscript_trace")
    client: TritonClient = deployment.client("http")
    model.assert_parity(client)
    pgid = deployment.server.process.pid  # type: ignore[attr-defined]
    os.kill(pgid, signal.SIGKILL)
    deployment.server.process.wait(10)  # type: ignore[attr-defined]
    with pytest.raises(ServerError, match="tritonserver \\(local\\) exited with code -9") as info:
        model.assert_parity(client)
    assert "successfully loaded 'scorer_torchscript_trace'" in info.value.log_tail
    deployment.close()
    assert group_members(pgid) == [], "the crashed server's stubs must not outlive it"
