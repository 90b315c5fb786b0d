"""Pipelines on the real bundled tritonserver, one server for the module: a three-step
pipeline (pre-processing function, classifier, post-processing function) served as an
ensemble, a sync BLS model and an async BLS model, each checked against the steps composed in
PyTorch over HTTP, gRPC and system shared memory; the batching proof per composing model; a
pipeline whose served post-processing differs from PyTorch's fails naming that step; an error
raised inside a called model reaches the client naming that model; what the checks record
reaches the gate report's pipelines section."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pytest_triton import InferenceError, factories
from pytest_triton.gate import document as gd
from pytest_triton.gate.markdown import render
from pytest_triton.plugin.gate_report import PARITY_PROPERTY
from pytest_triton.repository.pipeline import MODES
from pytest_triton.session.served_pipeline import ServedPipeline
from tests.helpers.gate_documents import document_of
from tests.helpers.pipeline_models import classifier_pipeline, wrong_pipeline

pytestmark = [pytest.mark.triton]

pipeline_repository = factories.repository(
    [],
    pipelines=[classifier_pipeline(), wrong_pipeline()],
    scope="module",
)
pipeline_server = factories.server(repository="pipeline_repository", scope="module")
classify = factories.pipeline("classify", server="pipeline_server")
wrong = factories.pipeline("wrong", server="pipeline_server")


@pytest.mark.parametrize("classify", MODES, indirect=True)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_served_pipeline_answers_like_its_steps_composed_in_pytorch(
    classify: ServedPipeline, protocol: str
) -> None:
    client = classify.deployment.client(protocol)  # type: ignore[arg-type]
    report = classify.assert_parity(client, batch_size=3, seed=5)
    assert report.ok and {d.name for d in report.diffs} == {"probs", "classes"}
    assert all(d.total > 0 for d in report.diffs)


def test_the_ensemble_answers_over_system_shared_memory(classify: ServedPipeline) -> None:
    classify.assert_parity(classify.deployment.client("http", "system"), batch_size=4, seed=9)


@pytest.mark.parametrize("classify", ["ensemble", "bls-async"], indirect=True)
def test_every_composing_model_batches_the_pipelines_requests(classify: ServedPipeline) -> None:
    """The ensemble (and the async BLS model, whose requests call the steps all at once)
    puts single-row requests in flight together at each step: each step's statistics show
    batches; the ensemble's own statistics cannot (it executes once per request)."""
    deltas = classify.assert_step_batching(classify.deployment.client("grpc"), requests=8)
    for step in ("preprocess", "model", "postprocess"):
        assert deltas[step].requests == 8 and deltas[step].execution_count < 8
    if classify.mode == "ensemble":
        assert deltas[classify.name].execution_count == deltas[classify.name].requests == 8


@pytest.mark.parametrize("classify", ["bls"], indirect=True)
def test_a_sync_bls_model_calls_the_steps_one_request_at_a_time(
    classify: ServedPipeline,
) -> None:
    """exec() blocks, so the sync BLS model's steps never see two requests together: the
    batching proof fails, naming the first step."""
    with pytest.raises(AssertionError, match=r"step 'preprocess'.*dynamic batching did not"):
        classify.assert_step_batching(classify.deployment.client("http"), requests=8)


def test_a_step_served_unlike_pytorch_is_named(wrong: ServedPipeline) -> None:
    with pytest.raises(AssertionError) as failure:
        wrong.assert_parity(wrong.deployment.client("http"), batch_size=3, seed=5)
    message = str(failure.value)
    assert "parity FAILED: pipeline 'wrong'" in message
    assert "first diverging step: 'postprocess'" in message
    assert "model 'wrong_postprocess'" in message
    assert "output 'probs'" in message
    reports = dict(
        (step.name, report)
        for step, report in wrong.step_reports(
            wrong.deployment.client("http"), wrong.reference(wrong.inputs(3, 5))
        )
    )
    assert reports["model"].ok and not reports["postprocess"].ok


@pytest.mark.parametrize("wrong", ["bls", "bls-async"], indirect=True)
def test_an_error_inside_a_called_model_names_that_model(wrong: ServedPipeline) -> None:
    client = wrong.deployment.client("grpc")
    with pytest.raises(InferenceError) as failure:
        wrong.infer(client, {"pixels": np.full((2, 4, 4), np.nan, np.float32)})
    message = str(failure.value)
    assert "step 'model'" in message and "model 'wrong_model' failed" in message
    assert "NaN pixels reached the classifier" in message
    assert wrong.infer(client, wrong.inputs(2))["probs"].shape == (2, 2)  # still serving


def test_the_gate_report_shows_each_pipeline_its_verdict_and_batching(
    classify: ServedPipeline, wrong: ServedPipeline, request: pytest.FixtureRequest
) -> None:
    """The checks' results travel as in a --triton-report session (the plugin's listener on
    the deployment puts them on this test's report) and the gate report's pipelines section
    shows each pipeline and mode: its parity verdict, the first diverging step of a failed
    check, and each composing model's batching."""
    classify.assert_parity(classify.deployment.client("http"), batch_size=2)
    classify.assert_step_batching(classify.deployment.client("grpc"), requests=8)
    with pytest.raises(AssertionError):
        wrong.assert_parity(wrong.deployment.client("http"), batch_size=3, seed=5)
    records = [
        json.loads(str(value))
        for name, value in request.node.user_properties
        if name == PARITY_PROPERTY
    ]
    assert [r["check"] for r in records] == [
        "pipeline_parity",
        "pipeline_batching",
        "pipeline_parity",
    ]
    good, bad = gd.pipeline_rows(records)
    assert (good["pipeline"], good["mode"], good["front_model"]) == (
        "classify",
        "ensemble",
        "classify",
    )
    assert good["parity_ok"] is True and good["first_diverging_step"] is None
    assert good["paths"] == ["http/none", "grpc/none"] and good["batched"] is True
    steps = {s["step"]: s for s in good["steps"]}
    assert list(steps) == ["preprocess", "model", "postprocess"]
    for step in steps.values():
        assert step["requests"] == 8 and step["executions"] < 8 and step["batched"], step
    assert steps["model"]["model"] == classify.step("model").name
    assert (bad["pipeline"], bad["parity_ok"], bad["first_diverging_step"]) == (
        "wrong",
        False,
        "postprocess",
    )
    assert bad["batched"] is None  # no batching proof asked of it
    markdown = render(document_of(records))
    assert "## Pipelines" in markdown
    assert (
        "| classify | ensemble | classify | http/none, grpc/none | PASS (1) | - | yes |" in markdown
    )
    assert "| wrong | ensemble | wrong | http/none | FAIL | postprocess | not checked |" in markdown
    assert f"| classify | ensemble | model | {steps['model']['model']} | 8 |" in markdown
