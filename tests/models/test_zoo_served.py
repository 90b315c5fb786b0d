"""Every zoo model (small configuration) on a real local server, every CPU format, both
protocols: parity, dynamic batching through the stats, and bad requests."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_triton import InferenceError, TritonClient, assert_dynamic_batching
from pytest_triton.session.deployment import Deployment, ServedModel

pytestmark = pytest.mark.triton


def test_parity_single_request(zoo_model: ServedModel, zoo_client: TritonClient) -> None:
    report = zoo_model.assert_parity(zoo_client, batch_size=3)
    assert report.ok and {d.name for d in report.diffs} == set(zoo_model.variant.spec.output_names)


def test_parity_of_a_larger_batch(zoo_model: ServedModel, zoo_client: TritonClient) -> None:
    zoo_model.assert_parity(zoo_client, batch_size=8, seed=11)


def test_batched_requests_answer_in_order_and_batch(
    zoo_model: ServedModel, zoo_client: TritonClient
) -> None:
    """N single requests in flight together: each answer equals PyTorch on its own row, and
    the statistics show the dynamic batcher combined them."""
    delta = zoo_model.assert_batched_parity(zoo_client, requests=8, seed=3)
    assert delta.requests == 8 and delta.inference_count == 8
    assert_dynamic_batching(delta)


# -- bad requests: each is rejected with Triton's own words, on both protocols --------------
@pytest.fixture
def mnist_onnx(zoo_server: Deployment) -> ServedModel:
    return zoo_server.model("mnist_onnx")


def _reject(
    client: TritonClient, model: str, inputs: dict[str, np.ndarray], pattern: str
) -> InferenceError:
    with pytest.raises(InferenceError, match=pattern) as info:
        client.infer(model, inputs, outputs=["output__0"])
    assert info.value.model == model and info.value.protocol == client.protocol
    assert f"{client.protocol} request to model {model!r} failed" in str(info.value)
    return info.value


def test_wrong_input_name(mnist_onnx: ServedModel, zoo_client: TritonClient) -> None:
    inputs = mnist_onnx.inputs(batch_size=2)
    inputs["not_an_input"] = inputs.pop("input__0")
    _reject(
        zoo_client,
        mnist_onnx.name,
        inputs,
        "unexpected inference input 'not_an_input' for model 'mnist_onnx'",
    )


def test_wrong_shape(mnist_onnx: ServedModel, zoo_client: TritonClient) -> None:
    _reject(
        zoo_client,
        mnist_onnx.name,
        {"input__0": np.zeros((2, 1, 27, 28), np.float32)},
        r"unexpected shape for input 'input__0' for model 'mnist_onnx'\. "
        r"Expected \[-1,1,28,28\], got \[2,1,27,28\]",
    )


def test_wrong_dtype(mnist_onnx: ServedModel, zoo_client: TritonClient) -> None:
    _reject(
        zoo_client,
        mnist_onnx.name,
        {"input__0": np.zeros((2, 1, 28, 28), np.float64)},
        "inference input 'input__0' data-type is 'FP64', but model 'mnist_onnx' expects 'FP32'",
    )


def test_batch_above_max_batch_size(mnist_onnx: ServedModel, zoo_client: TritonClient) -> None:
    assert mnist_onnx.variant.spec.max_batch_size == 8
    _reject(
        zoo_client,
        mnist_onnx.name,
        mnist_onnx.inputs(batch_size=9),
        "inference request batch-size must be <= 8 for 'mnist_onnx'",
    )


def test_unknown_model(mnist_onnx: ServedModel, zoo_client: TritonClient) -> None:
    error = _reject(
        zoo_client,
        "no_such_model",
        mnist_onnx.inputs(batch_size=1),
        "Request for unknown model: 'no_such_model' is not found",
    )
    assert error.status == {"http": "404", "grpc": "StatusCode.NOT_FOUND"}[zoo_client.protocol]
