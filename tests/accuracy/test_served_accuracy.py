"""assert_accuracy on the real bundled tritonserver: a served classifier judged by top-1
against labels and by agreement with the fp32 reference; a broken model (other weights behind
the same inputs) fails naming the metric, both values and the threshold; datasets that cannot
judge are refused before any request reaches the server."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from pytest_triton import DatasetError, ModelSpec, TritonClient, assert_accuracy, factories
from pytest_triton.session.deployment import Deployment

FEATURES, CLASSES = 16, 10


class Classifier(torch.nn.Module):
    """A linear classifier whose weights come from `seed`."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(FEATURES, CLASSES)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def spec(name: str, seed: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        module=lambda: Classifier(seed),
        example_inputs=(torch.randn(4, FEATURES),),
        inputs=["x"],
        outputs=["logits"],
        max_batch_size=32,
        formats=["torchscript-trace"],
    )


accuracy_repository = factories.repository([spec("good", 0), spec("broken", 1)], scope="module")
accuracy_server = factories.server(repository="accuracy_repository", scope="module")


@pytest.fixture(scope="module")
def client(accuracy_server: Deployment) -> TritonClient:
    return accuracy_server.client("http")


def dataset(samples: int = 400, batch: int = 25, flip: float = 0.03) -> list[Any]:
    """(inputs, labels) batches; the labels are the fp32 model's answers with a share flipped,
    so its top-1 is a known 1 - flip."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((samples, FEATURES)).astype(np.float32)
    with torch.inference_mode():
        labels = Classifier(0)(torch.from_numpy(x)).argmax(1).numpy()
    flipped = rng.choice(samples, int(samples * flip), replace=False)
    labels[flipped] = (labels[flipped] + 1) % CLASSES
    return [({"x": x[i : i + batch]}, labels[i : i + batch]) for i in range(0, samples, batch)]


def served_requests(client: TritonClient, model: str) -> int:
    stats = client.statistics(model)["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


def test_the_served_model_keeps_the_references_top1_and_agrees_with_it(
    accuracy_server: Deployment, client: TritonClient
) -> None:
    good = accuracy_server.model("good-torchscript-trace-hosted")
    data = dataset()
    result = good.assert_accuracy(client, data, "top1")
    assert result.reference == pytest.approx(0.97) and result.served == result.reference
    assert result.samples == 400 and result.interval_method == "wilson"
    assert result.interval[0] < 0.97 < result.interval[1] and result.ok
    agreement = good.assert_accuracy(client, [x for x, _ in data], "top1_agreement")
    assert agreement.served == agreement.reference == 1.0
    cosine = good.assert_accuracy(client, data, "cosine")
    assert cosine.served == pytest.approx(1.0) and cosine.interval_method == "bootstrap"


def test_a_broken_model_fails_naming_the_metric_values_threshold_and_classes(
    accuracy_server: Deployment, client: TritonClient
) -> None:
    accuracy_server.model("broken-torchscript-trace-hosted")
    reference = accuracy_server.model("good-torchscript-trace-hosted").native
    with pytest.raises(AssertionError) as failed:
        assert_accuracy(client, "broken_torchscript_trace", dataset(), "top1", reference)
    text = str(failed.value)
    for part in ("accuracy FAILED", "metric top1", "vs fp32 reference 0.9700", "threshold 0.9603"):
        assert part in text, text
    assert "where the served model loses most:" in text and "class " in text, text


def test_datasets_that_cannot_judge_are_refused_before_any_request(
    accuracy_server: Deployment, client: TritonClient
) -> None:
    good = accuracy_server.model("good-torchscript-trace-hosted")
    before = served_requests(client, good.name)
    data = dataset()
    with pytest.raises(DatasetError, match=r"missing inputs \['x'\], unknown inputs \['y'\]"):
        good.assert_accuracy(client, [({"y": x["x"]}, y) for x, y in data], "top1")
    with pytest.raises(DatasetError, match=r"input 'x': datatype FP64 but model .* takes FP32"):
        good.assert_accuracy(client, [x["x"].astype(np.float64) for x, _ in data], "cosine")
    with pytest.raises(DatasetError, match=r"input 'x': shape \[25, 8\] but .* takes \[-1, 16\]"):
        good.assert_accuracy(client, [x["x"][:, :8] for x, _ in data], "cosine")
    with pytest.raises(DatasetError, match=r"metric top1 is scored against labels .* has none"):
        good.assert_accuracy(client, [x for x, _ in data], "top1")
    with pytest.raises(DatasetError, match=r"50 samples cannot judge top1 .* at least 100 samples"):
        good.assert_accuracy(client, dataset()[:2], "top1")
    assert served_requests(client, good.name) == before
