"""Statistics deltas on a real server: batching shows, its absence is named, stats settle."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_triton import ModelStats, Repository, StatsWindow, assert_dynamic_batching
from pytest_triton.base.config_resolution import resolve
from pytest_triton.session.deployment import Deployment
from pytest_triton.session.lifecycle import start_deployment
from tests.helpers.tiny_models import scorer_spec

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    specs = [
        scorer_spec("batched", formats=["torchscript-trace"]),
        scorer_spec("unbatched", formats=["torchscript-trace"], dynamic_batching=None),
    ]
    deployment = start_deployment(resolve(), Repository(tmp_path_factory.mktemp("repo"), specs))
    yield deployment
    deployment.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_batched_model_shows_combined_executions(deployment: Deployment, protocol: str) -> None:
    model = deployment.model("batched_torchscript_trace")
    delta = model.assert_batched_parity(deployment.client(protocol), requests=8)  # type: ignore[arg-type]
    assert delta.requests == 8 and delta.inference_count == 8
    assert delta.execution_count < 8 and sum(delta.batches.values()) == delta.execution_count
    assert delta.avg_batch_size == 8 / delta.execution_count
    breakdown = delta.latency_breakdown_us()
    assert set(breakdown) == {
        "request",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "overhead",
    }
    assert breakdown["queue"] > 0 and breakdown["compute_infer"] > 0
    assert breakdown["request"] >= breakdown["queue"] + breakdown["compute_infer"]
    assert_dynamic_batching(delta)


def test_missing_batching_is_named(deployment: Deployment) -> None:
    model = deployment.model("unbatched_torchscript_trace")
    delta = model.assert_batched_parity(deployment.client("grpc"), requests=8)
    assert delta.execution_count == 8 and delta.batches == {1: 8}
    with pytest.raises(
        AssertionError,
        match=r"dynamic batching did not happen: every request "
        r"ran on its own\. requests 8, .*batch sizes \[1x8\]",
    ):
        assert_dynamic_batching(delta)


def test_window_waits_for_lagging_counters(deployment: Deployment) -> None:
    model = deployment.model("batched_torchscript_trace")
    client = deployment.client("http")
    with StatsWindow(client, model.name, expect_requests=3) as window:
        for seed in range(3):
            model.infer(client, model.inputs(batch_size=2, seed=seed))
    assert window.delta.requests == 3 and window.delta.inference_count == 6
    with StatsWindow(client, model.name, settle_s=0.5) as idle:
        pass
    assert idle.delta == ModelStats()


def test_deltas_subtract_and_add() -> None:
    from pytest_triton.client.stats import Duration

    a = ModelStats(
        inference_count=10, execution_count=4, success=Duration(5, 500), batches={1: 2, 4: 2}
    )
    b = ModelStats(
        inference_count=4, execution_count=3, success=Duration(3, 200), batches={1: 2, 2: 1}
    )
    assert a - b == ModelStats(
        inference_count=6, execution_count=1, success=Duration(2, 300), batches={2: -1, 4: 2}
    )
    assert (a - b) + b == a
