"""Pipeline specs refused before any export, naming the step and tensor; the ensemble and BLS
configs as model_config_pb2 writes them (no server)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_triton import SpecError
from pytest_triton.repository import pbtxt
from pytest_triton.repository.pipeline import PipelineSpec, Step
from pytest_triton.repository.pipeline_build import PipelineRepository
from tests.helpers.pipeline_models import Classifier, classifier_pipeline, normalize, top2


def _with_steps(*steps: Step, **fields: object) -> PipelineSpec:
    return dataclasses.replace(classifier_pipeline(), steps=list(steps), **fields)  # type: ignore[arg-type]


PRE = Step("preprocess", normalize, inputs=["image"], outputs=["pixels"])
MODEL = Step("model", Classifier(), inputs=["pixels"], outputs=["logits"])
POST = Step("postprocess", top2, inputs=["logits"], outputs=["probs", "classes"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (_with_steps(MODEL, PRE, POST), "step 'model' input 'pixels': step 'preprocess' makes it"),
        (
            _with_steps(PRE, POST),
            "step 'postprocess' input 'logits': no step makes it and it is not a pipeline input",
        ),
        (
            _with_steps(PRE, MODEL, POST, outputs=["probs"]),
            "'classes' (made by step 'postprocess') is consumed by no step",
        ),
        (
            _with_steps(PRE, MODEL, dataclasses.replace(POST, outputs=["probs", "pixels"])),
            "step 'postprocess' output 'pixels' is already made by step 'preprocess'",
        ),
        (
            _with_steps(PRE, MODEL, dataclasses.replace(POST, format="torchscript-script")),
            "step 'postprocess' is a function, which is exported by tracing",
        ),
        (_with_steps(PRE, MODEL, dataclasses.replace(POST, name="bls")), "the name is taken"),
        (_with_steps(PRE, MODEL, POST, modes=("stream",)), "modes ['stream']"),
    ],
)
def test_a_pipeline_that_cannot_be_composed_is_refused_naming_step_and_tensor(
    spec: PipelineSpec, message: str
) -> None:
    with pytest.raises(SpecError, match="pipeline 'classify'") as refused:
        spec.validate()
    assert message in str(refused.value)


def test_a_step_that_cannot_take_what_the_step_before_returns_is_named() -> None:
    wide = Step("model", torch.nn.Linear(3, 2), inputs=["pixels"], outputs=["logits"])
    with pytest.raises(SpecError) as refused:
        _with_steps(PRE, wide, POST).step_specs()
    text = str(refused.value)
    assert "step 'model' failed on what it is given (pixels: float32 [8, 4, 4])" in text


def test_the_reference_composes_the_steps_in_pytorch() -> None:
    spec = classifier_pipeline()
    inputs = spec.make_inputs(3, seed=2)
    tensors = spec.reference(inputs)
    with torch.no_grad():
        logits = Classifier()(normalize(torch.from_numpy(inputs["image"])))
        probs, classes = top2(logits)
    np.testing.assert_allclose(tensors["logits"], logits.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tensors["probs"], probs.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(tensors["classes"], classes.numpy())


def test_the_ensemble_and_bls_configs_map_each_steps_tensors(tmp_path: Path) -> None:
    repo = PipelineRepository.with_pipelines([classifier_pipeline()], directory=tmp_path)
    repo.plan(["python"])
    ensemble = pbtxt.read_config(tmp_path / "classify" / "config.pbtxt")
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == 8
    assert [i.name for i in ensemble.input] == ["image"]
    assert [o.name for o in ensemble.output] == ["probs", "classes"]
    steps = ensemble.ensemble_scheduling.step
    assert [s.model_name for s in steps] == [
        "classify_preprocess",
        "classify_model",
        "classify_postprocess",
    ]
    assert dict(steps[1].input_map) == {"pixels": "pixels"}
    assert dict(steps[2].output_map) == {"probs": "probs", "classes": "classes"}
    for mode, name in (("bls", "classify_bls"), ("bls-async", "classify_bls_async")):
        bls = pbtxt.read_config(tmp_path / name / "config.pbtxt")
        assert bls.backend == "python" and bls.dynamic_batching.max_queue_delay_microseconds
        assert "classify_model" in bls.parameters["steps"].string_value
        source = (tmp_path / name / "1" / "model.py").read_text()
        assert ("\nASYNC = True" in source) == (mode == "bls-async")
    assert not (tmp_path / "classify_preprocess").exists()  # steps export when first loaded
