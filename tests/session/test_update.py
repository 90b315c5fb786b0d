"""A model updated under load (session/update.py): version 2 (same architecture, other
weights) loaded beside version 1 and version 1 retired while threads keep requests in flight
to the model without a version; every answer must be version 1's or version 2's, only version
2's once version 1 is retired, and no request may fail. On a local server in explicit model
control, as the embedded server of a load test runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from pytest_triton.base.config import resolve
from pytest_triton.repository.builder import Repository
from pytest_triton.session.deployment import Deployment, ServedModel
from pytest_triton.session.lifecycle import start_deployment
from pytest_triton.session.update import update_under_load
from tests.helpers.probe_models import probe_spec, probe_v2_spec

pytestmark = [pytest.mark.triton]


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    spec = dataclasses.replace(probe_spec(), formats=("onnx",))
    repo = Repository.create([spec], progress=lambda _: None)
    config = resolve().with_overrides({"launcher": "local", "model_control": "explicit"})
    deployment = start_deployment(config, repo)
    try:
        yield deployment
    finally:
        deployment.close()
        repo.remove()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_update_under_load_serves_right_answers_throughout(
    deployment: Deployment, protocol: str
) -> None:
    served: ServedModel = deployment.model("probe_onnx")
    client = deployment.client(protocol)  # type: ignore[arg-type]
    report = update_under_load(served, probe_v2_spec(), client, users=4)
    print(report.describe())
    report.assert_ok()
    assert report.switch is not None
    before, after = report.by_version(after_switch=False), report.by_version(after_switch=True)
    assert before.get("1", 0) > 10 and after.get("2", 0) > 10, report.describe()
    assert "1" not in after
    assert report.p99_ms(during_switch=True) == report.p99_ms(during_switch=True)  # measured
    assert client.is_model_ready("probe_onnx", "2")
    assert not client.is_model_ready("probe_onnx", "1")
