"""A model updated under load (session/update.py): version 2 (same architecture, other
weights) loaded beside version 1 and version 1 retired while threads keep requests in flight
to the model without a version; every answer must be version 1's or version 2's, only version
2's once version 1 is retired, and no request may fail. On a local server in explicit model
control, as the embedded server of a load test runs, and on one polling its repository (the
update made by changing the repository on disk). A version 2 that serves wrong answers fails
the gate."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.repository import pbtxt
from pytest_triton.repository.builder import Repository
from pytest_triton.session.deployment import Deployment, ServedModel
from pytest_triton.session.lifecycle import start_deployment
from pytest_triton.session.update import update_under_load
from tests.helpers.probe_models import broken_v2_spec, probe_spec, probe_v2_spec

pytestmark = [pytest.mark.triton]


def _deployment(**overrides: Any) -> Iterator[Deployment]:
    spec = dataclasses.replace(probe_spec(), formats=("onnx",))
    repo = Repository.create([spec], progress=lambda _: None)
    config = resolve().with_overrides({"launcher": "local", **overrides})
    deployment = start_deployment(config, repo)
    try:
        yield deployment
    finally:
        deployment.close()
        repo.remove()


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    yield from _deployment(model_control="explicit")


@pytest.fixture
def polled() -> Iterator[Deployment]:
    """A server that polls its repository every second (Triton's default is 15 s)."""
    yield from _deployment(model_control="poll", server_args="--repository-poll-secs=1")


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


def test_an_update_by_changing_a_polled_repository_serves_right_answers(
    polled: Deployment,
) -> None:
    served = polled.model("probe_onnx")
    client = polled.client("http")
    report = update_under_load(served, probe_v2_spec(), client, users=4)
    print(report.describe())
    report.assert_ok()
    before, after = report.by_version(after_switch=False), report.by_version(after_switch=True)
    assert before.get("1", 0) > 10 and after.get("2", 0) > 10, report.describe()
    assert client.is_model_ready("probe_onnx", "2")
    assert not client.is_model_ready("probe_onnx", "1")
    directory = polled.repository.model_dir(served.variant)
    assert (directory / "1").is_dir() and (directory / "2").is_dir()  # 1 kept on disk
    on_disk = pbtxt.read_config(directory / "config.pbtxt")
    assert list(on_disk.version_policy.specific.versions) == [2]
    assert not list(polled.repository.root.parent.glob(f".{polled.repository.root.name}.*"))


def test_an_update_to_a_version_serving_wrong_answers_fails_the_gate(
    deployment: Deployment,
) -> None:
    served = deployment.model("probe_onnx")
    report = update_under_load(served, broken_v2_spec(), deployment.client("http"), users=2)
    print(report.describe())
    assert not report.ok
    assert report.by_version(after_switch=True).get("2", 0) == 0
    with pytest.raises(AssertionError) as failed:
        report.assert_ok()
    message = str(failed.value)
    assert "wrong answers, the first: wrong answer: model 'probe_onnx'" in message, message
    assert "no answer of version 2 after the switch" in message, message


def test_the_load_goes_on_until_answers_sent_after_the_switch_come_back(
    deployment: Deployment,
) -> None:
    """No time at all after the retirement (after_s=0, as when every request takes longer
    than after_s on a busy machine: a full run saw 1.1-s requests and no answer after the
    switch): the load still goes on until 16 requests sent after it are answered."""
    served = deployment.model("probe_onnx")
    report = update_under_load(served, probe_v2_spec(), deployment.client("http"), after_s=0.0)
    report.assert_ok()
    after = report.by_version(after_switch=True)
    assert set(after) == {"2"} and after["2"] >= 16, report.describe()
