"""End-to-end checks as the examples' clients make them, on data the tests generate:
MNIST classes, BERT answer spans, DLRM click-through probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_triton import TritonClient
from pytest_triton.repository import FORMATS
from pytest_triton.session.deployment import Deployment

pytestmark = [pytest.mark.triton, pytest.mark.parametrize("fmt", FORMATS)]


def _model_name(zoo: str, fmt: str) -> str:
    return f"{zoo}_{fmt.replace('-', '_')}"


def test_mnist_predicted_classes_equal_native_argmax(
    zoo_server: Deployment, zoo_client: TritonClient, fmt: str
) -> None:
    model = zoo_server.model(_model_name("mnist", fmt))
    inputs = model.inputs(batch_size=8, seed=5)
    served = model.infer(zoo_client, inputs)["output__0"]
    native = model.native(inputs)["output__0"]
    assert served.shape == (8, 10)
    np.testing.assert_array_equal(served.argmax(1), native.argmax(1))


def _best_span(start: np.ndarray, end: np.ndarray, max_len: int = 30) -> tuple[int, int]:
    """The SQuAD client's decoding: the (start, end) pair with end >= start maximising
    start + end logits, within max_len tokens."""
    scores = start[:, None] + end[None, :]
    i, j = np.indices(scores.shape)
    scores = np.where((j >= i) & (j - i < max_len), scores, -np.inf)
    s, e = np.unravel_index(np.argmax(scores), scores.shape)
    return int(s), int(e)


def test_bert_answer_spans_equal_native(
    zoo_server: Deployment, zoo_client: TritonClient, fmt: str
) -> None:
    model = zoo_server.model(_model_name("bert", fmt))
    inputs = model.inputs(batch_size=4, seed=9)
    served = model.infer(zoo_client, inputs)
    native = model.native(inputs)
    for row in range(4):
        assert _best_span(served["start_logits"][row], served["end_logits"][row]) == _best_span(
            native["start_logits"][row], native["end_logits"][row]
        ), row


def test_dlrm_ctr_probabilities(zoo_server: Deployment, zoo_client: TritonClient, fmt: str) -> None:
    model = zoo_server.model(_model_name("dlrm", fmt))
    inputs = model.inputs(batch_size=64, seed=2)
    served = model.infer(zoo_client, inputs)["output"]
    native = model.native(inputs)["output"]
    assert served.shape == (64, 1)
    assert np.all((served >= 0) & (served <= 1)), "a CTR must be a probability"
    np.testing.assert_allclose(served, native, rtol=1e-4, atol=1e-6)
    assert served.std() > 0, "inputs must not all map to one probability"
