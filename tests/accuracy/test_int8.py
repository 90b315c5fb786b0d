"""INT8 variants on the real bundled tritonserver, judged by accuracy: the zoo's MNIST CNN
trained on scikit-learn's digits, quantized static QDQ on real calibration batches, keeps 99%
of fp32 PyTorch's held-out top-1; the same CNN calibrated on zeros fails naming top-1; BERT
(small) quantized dynamically keeps its answer spans while element-wise parity of the same
variant fails: the test shows why both checks exist. Under load (a short, paced Locust run)
the INT8 CNN's sampled answers are judged by top-1 agreement with fp32 PyTorch: it meets its
agreement target, the one calibrated on zeros misses it, named with its rate and target.
The same server serves the CNN in fp16 (TorchScript trace and ONNX, on the CPU): it too is
judged by held-out top-1 against fp32 PyTorch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pytest_triton import Int8, ParityNotApplicable, TritonClient, assert_parity, factories
from pytest_triton.accuracy import metrics
from pytest_triton.models import digits, zoo_spec
from pytest_triton.session.deployment import Deployment
from tests.helpers.locust_runs import REPO, run_locust, subprocess_env

DIGITS = digits.load()
AGREEMENT_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "digits_agreement.py"
AGREEMENT_TARGET = 0.98
BERT_INT8 = Int8(per_channel=True, op_types=("MatMul", "Gemm"), fp32_head=1)


SPECS = [
    digits.int8_spec("digits"),
    digits.int8_spec("digits_zeros", np.zeros((64, 1, 28, 28), np.float32)),
    # quantized as docs/accuracy.md recommends for BERT: weight products only (the embedding
    # tables stay fp32), a scale per output channel, the span head in fp32
    zoo_spec("bert", "small", int8=BERT_INT8, formats=["onnx"], instance_count=1),
    digits.fp16_spec("digits_fp16"),  # fp32 and fp16, TorchScript (trace) and ONNX
]
int8_repository = factories.repository(SPECS, scope="module")
int8_server = factories.server(repository="int8_repository", scope="module", precisions=("int8",))


@pytest.fixture(scope="module")
def client(int8_server: Deployment) -> TritonClient:
    return int8_server.client("http")


def test_the_digits_cnn_is_a_real_classifier_in_pytorch() -> None:
    assert digits.held_out_accuracy(digits.trained()) >= 0.95
    assert len(DIGITS.test_labels) == 360 and set(DIGITS.test_labels) == set(range(10))


def test_int8_mnist_keeps_99_percent_of_fp32_top1(
    int8_server: Deployment, client: TritonClient
) -> None:
    served = int8_server.model("digits-onnx-int8-hosted")
    result = served.assert_accuracy(client, DIGITS.batches(32), "top1", min_ratio=0.99)
    assert result.reference >= 0.95 and result.samples == 360
    assert result.ratio >= 0.99 and result.served < 1.0
    with pytest.raises(ParityNotApplicable, match=r"INT8: .* judge it by accuracy"):
        served.assert_parity(client)


def test_int8_calibrated_on_zeros_fails_naming_top1(
    int8_server: Deployment, client: TritonClient
) -> None:
    broken = int8_server.model("digits_zeros-onnx-int8-hosted")
    with pytest.raises(AssertionError) as failed:
        broken.assert_accuracy(client, DIGITS.batches(32), "top1")
    text = str(failed.value)
    assert "accuracy FAILED" in text and "metric top1 (against labels)" in text, text
    assert "threshold" in text and "class " in text, text


def test_int8_bert_keeps_its_spans_and_fails_element_wise_parity(
    int8_server: Deployment, client: TritonClient
) -> None:
    bert = int8_server.model("bert-onnx-int8-hosted")
    batches = [bert.inputs(8, seed) for seed in range(16)]
    # The zoo's BERT is untrained: its position scores are nearly flat, so INT8 rounding
    # can swap a best position with its runner-up; quantized with onnxruntime's defaults
    # (embeddings and head in int8 too) it kept span F1 0.973 of fp32's, under MLPerf's 0.99;
    # as BERT_INT8 declares, 0.999 (in process); the reference's best stays in its top 2.
    for output in ("start_logits", "end_logits"):
        kept = bert.assert_accuracy(client, batches, metrics.agreement(2, output))
        assert kept.served == 1.0 and kept.samples == 128
    spans = bert.assert_accuracy(client, batches, "span_f1", min_ratio=0.99)
    assert spans.interval_method == "bootstrap" and spans.ratio >= 0.99
    served = bert.infer(client, batches[0])
    with pytest.raises(AssertionError, match="parity FAILED"):
        assert_parity(bert.native(batches[0]), served, model="bert", backend="onnx-int8")


@pytest.mark.parametrize("fmt", ["torchscript_trace", "onnx"])
def test_fp16_mnist_keeps_99_percent_of_fp32_top1(
    int8_server: Deployment, client: TritonClient, fmt: str
) -> None:
    """fp16 on the CPU: half inputs on the wire, the top-1 of fp32 PyTorch (not of fp16) kept."""
    served = int8_server.model(f"digits_fp16_{fmt}_fp16")
    assert served.variant.precision == "fp16" and served.variant.gpu is False
    result = served.assert_accuracy(client, DIGITS.batches(32), "top1", min_ratio=0.99)
    assert result.reference >= 0.95 and result.samples == 360 and result.precision == "fp16"
    assert result.ratio >= 0.99, result.describe()
    # unlike INT8, fp16 still has an element-wise check: against PyTorch run in fp16 (the
    # parity tables' fp16 rows), which says the server computes what PyTorch computes in fp16
    report = served.assert_parity(client)
    assert report.ok and [d.dtype for d in report.diffs] == ["FP16"], report.describe()


@pytest.fixture(scope="module")
def agreement_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The held-out digits and fp32 PyTorch's logits of them, for the Locust process (which
    then imports neither torch nor scikit-learn)."""
    path = tmp_path_factory.mktemp("digits") / "held_out.npz"
    with torch.inference_mode():
        logits = digits.trained()(torch.from_numpy(DIGITS.test_images)).numpy()
    np.savez(path, images=DIGITS.test_images, logits=logits)
    return path


def agreement_run(
    deployment: Deployment, variant: str, data: Path, tmp_path: Path
) -> dict[str, Any]:
    """2 users at 20 requests/s each for 4 s, every answer's values judged by agreement."""
    done = run_locust(
        AGREEMENT_LOCUSTFILE,
        "--headless",
        "-u",
        "2",
        "-r",
        "10",
        "-t",
        "4s",
        "--host",
        f"http://{deployment.server.endpoints.http}",
        "--triton-model",
        deployment.model(variant).name,
        "--triton-check-every",
        "1",
        "--triton-min-agreement",
        str(AGREEMENT_TARGET),
        tmp_path=tmp_path,
        timeout=120,
        env=subprocess_env(DIGITS_AGREEMENT_DATA=str(data)),
    )
    assert done.report is not None, done.tail()
    (check,) = [c for c in done.report["checks"] if c["name"] == "answer_agreement"]
    return {**done.report["measured"], "code": done.code, "output": done.output, "check": check}


@pytest.mark.load
def test_int8_under_load_meets_its_agreement_target(
    int8_server: Deployment, agreement_data: Path, tmp_path: Path
) -> None:
    """Its rounding is no wrong answer (element-wise, every answer would be one)."""
    run = agreement_run(int8_server, "digits-onnx-int8-hosted", agreement_data, tmp_path)
    output = run["output"]
    assert run["code"] == 0 and run["wrong_answers"] == 0 and run["failures"] == 0, output[-3000:]
    assert run["agreement_samples"] >= 16 * 40, output[-3000:]  # 40+ answers of 16 digits
    assert AGREEMENT_TARGET <= run["answer_agreement"] <= 1.0
    assert run["check"]["passed"] is True and run["check"]["limit"] == AGREEMENT_TARGET
    assert f"samples agree, rate {run['answer_agreement']:.4f}, target >= 0.98: met" in output


@pytest.mark.load
def test_int8_calibrated_on_zeros_under_load_misses_it(
    int8_server: Deployment, agreement_data: Path, tmp_path: Path
) -> None:
    run = agreement_run(int8_server, "digits_zeros-onnx-int8-hosted", agreement_data, tmp_path)
    output = run["output"]
    assert run["code"] == 1 and run["wrong_answers"] == 0, output[-3000:]
    assert run["answer_agreement"] < AGREEMENT_TARGET and run["check"]["passed"] is False
    n = run["agreement_samples"]
    assert (
        f"RESULT: FAIL - answer_agreement measured {run['answer_agreement']:.3g}, target >= "
        f"0.98 (top-1 agreement with the fp32 reference, N={n} samples)"
    ) in output, output[-3000:]
