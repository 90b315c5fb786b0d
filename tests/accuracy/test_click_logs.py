"""DLRM judged by ROC AUC on click logs drawn from a known model (models/click_logs.py), on
the session's real zoo server: the served fp32 DLRM ranks the samples as the generating
model does (its AUC is the generating model's, ratio >= 0.99), and a DLRM with other
weights than its reference's fails naming roc_auc, both values and the threshold."""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pytest

from pytest_triton import TritonClient, assert_accuracy
from pytest_triton.base.dtypes import Array
from pytest_triton.models import click_logs, dlrm
from pytest_triton.session.deployment import Deployment

pytestmark = pytest.mark.triton
LOGS = click_logs.draw()


@pytest.fixture(scope="module")
def client(zoo_server: Deployment) -> TritonClient:
    """One protocol: the dataset's answers, not the protocols, are the question here."""
    return zoo_server.client("http")


def test_the_click_logs_follow_their_generating_model() -> None:
    again = click_logs.draw()
    np.testing.assert_array_equal(again.clicks, LOGS.clicks)  # a fixed seed: the same log
    assert len(LOGS) == click_logs.SAMPLES and 0.3 < LOGS.clicks.mean() < 0.7
    assert 0.85 < click_logs.generating_auc(LOGS) < 0.95
    other = click_logs.draw(model_seed=1)
    np.testing.assert_array_equal(
        other.inputs["categorical_features"], LOGS.inputs["categorical_features"]
    )
    assert 0.85 < click_logs.generating_auc(other) < 0.95 and (other.clicks != LOGS.clicks).any()


def test_the_served_dlrm_agrees_with_the_generating_model(
    zoo_server: Deployment, client: TritonClient
) -> None:
    served = zoo_server.model("dlrm_onnx")
    result = served.assert_accuracy(client, LOGS.batches(), "roc_auc", name="click logs")
    # the fp32 reference ranks the samples as the generating probabilities do
    assert result.reference == pytest.approx(click_logs.generating_auc(LOGS), abs=1e-9)
    assert result.ratio >= 0.99 and result.samples == click_logs.SAMPLES
    assert result.interval_method == "bootstrap" and result.interval[0] < result.served


def test_a_dlrm_with_other_weights_fails_naming_roc_auc(
    zoo_server: Deployment, client: TritonClient
) -> None:
    """The served zoo DLRM (seed 0) against logs and a reference of seed 1."""
    served = zoo_server.model("dlrm_onnx")
    other = dlrm.build(dlrm.Config.small(), seed=1)
    logs = click_logs.draw(model_seed=1)

    def reference(inputs: Mapping[str, Array]) -> dict[str, Array]:
        import torch

        with torch.inference_mode():
            tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
            return {"output": other(**tensors).numpy()}

    with pytest.raises(AssertionError) as failed:
        assert_accuracy(client, served.name, logs.batches(), "roc_auc", reference)
    text = str(failed.value)
    named = re.search(
        r"accuracy FAILED: model 'dlrm_onnx', metric roc_auc \(against labels\) served "
        r"([\d.]+) vs fp32 reference ([\d.]+): ratio [\d.]+, threshold ([\d.]+) "
        r"\(>= 0.99 x reference\), N=2048",
        text,
    )
    assert named is not None, text
    served_auc, reference_auc, threshold = map(float, named.groups())
    assert served_auc < 0.6 < 0.85 < reference_auc  # other weights rank about at random
    assert threshold == pytest.approx(0.99 * reference_auc, abs=1e-4)
