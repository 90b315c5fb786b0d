"""The accuracy part of the release gate: the faster variants are judged by what they answer
on a dataset, against fp32 PyTorch on the same data (docs/accuracy.md). MNIST (the zoo's CNN
trained on scikit-learn's bundled digits) in fp32 and INT8 by held-out top-1; BERT small in
INT8 by agreement with fp32 PyTorch's answer positions."""

import pytest
import torch

from pytest_triton import ModelSpec, TritonClient, factories
from pytest_triton.accuracy import metrics
from pytest_triton.models import zoo_spec
from pytest_triton.models.digits import load, trained
from pytest_triton.session.deployment import Deployment

DIGITS = load()
MNIST = ModelSpec(
    name="mnist_digits",
    module=trained,
    example_inputs=(torch.from_numpy(DIGITS.train_images[:4]),),
    inputs=["input__0"],
    outputs=["output__0"],
    max_batch_size=64,
    formats=["onnx"],
    int8=True,
    calibration=lambda: [{"input__0": DIGITS.train_images[i : i + 64]} for i in range(0, 256, 64)],
)
accuracy_repository = factories.repository(
    [MNIST, zoo_spec("bert", "small", int8=True, formats=["onnx"], instance_count=1)],
    scope="module",
)
accuracy_server = factories.server(repository="accuracy_repository", scope="module")


@pytest.fixture(scope="module")
def client(accuracy_server: Deployment) -> TritonClient:
    return accuracy_server.client("http")


@pytest.mark.parametrize("variant", ["mnist_digits-onnx-hosted", "mnist_digits-onnx-int8-hosted"])
def test_mnist_keeps_99_percent_of_fp32_top1(
    accuracy_server: Deployment, client: TritonClient, variant: str
) -> None:
    model = accuracy_server.model(variant)
    model.assert_accuracy(
        client, DIGITS.batches(32), "top1", min_ratio=0.99, name="digits held-out"
    )


def test_bert_int8_keeps_the_answer_positions(
    accuracy_server: Deployment, client: TritonClient
) -> None:
    bert = accuracy_server.model("bert-onnx-int8-hosted")
    batches = [bert.inputs(8, seed) for seed in range(16)]
    for output in ("start_logits", "end_logits"):
        bert.assert_accuracy(client, batches, metrics.agreement(2, output), name="generated tokens")
