"""Answers checked under load (parity/answers.py), on answers built as Triton sends them: every
answer's shapes and dtypes, a header seen correct before not decoded again, a sample of the
answers compared with the parity tolerances, messages that name the difference and stay few."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from pytest_triton.base.errors import WrongAnswer
from pytest_triton.client.wire.http_conn import HttpReply
from pytest_triton.client.wire.request import (
    PreparedRequest,
    RawAnswer,
    answer_header,
    build_request,
    read_answer,
)
from pytest_triton.parity import answers
from pytest_triton.parity.answers import DETAILED, AnswerCheck, WrongSoFar

X = np.arange(8, dtype=np.float32).reshape(2, 4)
RIGHT = X * 2


def http_answer(y: np.ndarray, name: str = "y", version: str = "1") -> HttpReply:
    datatype = {"float32": "FP32", "float64": "FP64", "int64": "INT64"}[str(y.dtype)]
    header = json.dumps(
        {
            "model_name": "m",
            "model_version": version,
            "outputs": [
                {
                    "name": name,
                    "datatype": datatype,
                    "shape": list(y.shape),
                    "parameters": {"binary_data_size": y.nbytes},
                }
            ],
        }
    ).encode()
    return HttpReply(200, bytearray(header + y.tobytes()), len(header))


def grpc_answer(y: np.ndarray, version: str = "1") -> bytes:
    response = service_pb2.ModelInferResponse(model_name="m", model_version=version)
    out = response.outputs.add(name="y", datatype="FP32")
    out.shape.extend(y.shape)
    response.raw_output_contents.append(y.tobytes())
    return response.SerializeToString()


def request(protocol: str = "http") -> PreparedRequest:
    return build_request(protocol, "127.0.0.1:1", "m", {"x": X}, None)  # type: ignore[arg-type]


def check(req: PreparedRequest, every: int, **references: Any) -> AnswerCheck:
    return AnswerCheck("m", [(req, references or {"v": {"y": RIGHT}})], every=every)


ANSWERS = [("http", http_answer), ("grpc", grpc_answer)]


@pytest.mark.parametrize(("protocol", "answer"), ANSWERS)
def test_right_answers_pass_and_a_known_header_is_not_decoded_again(
    protocol: str, answer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = request(protocol)
    checker = check(req, every=0)
    decoded: list[object] = []

    def counting(r: PreparedRequest, raw: RawAnswer) -> Any:
        decoded.append(raw)
        return read_answer(r, raw)

    monkeypatch.setattr(answers, "read_answer", counting)
    for _ in range(5):
        assert checker.check(req, answer(RIGHT)).wrong is None
    assert len(decoded) == 1  # the first answer only: later ones have its length and header
    assert checker.check(req, answer(RIGHT + 1)).wrong is None  # values are not sampled
    assert len(decoded) == 1


def test_the_grpc_header_stops_before_the_tensor_bytes() -> None:
    message = grpc_answer(RIGHT)
    header = answer_header(message)
    parsed = service_pb2.ModelInferResponse.FromString(header)
    assert parsed.outputs[0].name == "y" and list(parsed.outputs[0].shape) == [2, 4]
    assert not parsed.raw_output_contents and message.startswith(header)
    assert answer_header(grpc_answer(RIGHT + 5)) == header


@pytest.mark.parametrize(
    ("served", "problem"),
    [
        (RIGHT[:1], "served shape (1, 4) != native shape (2, 4)"),
        (RIGHT.astype(np.float64), "served dtype float64 != native dtype float32"),
    ],
)
def test_every_answer_is_checked_for_shape_and_dtype(served: np.ndarray, problem: str) -> None:
    req = request()
    checker = check(req, every=0)
    assert checker.check(req, http_answer(RIGHT)).wrong is None
    wrong = checker.check(req, http_answer(served)).wrong
    assert isinstance(wrong, WrongAnswer)
    assert str(wrong).startswith("wrong answer: model 'm': output 'y': ") and problem in str(wrong)


def test_a_missing_output_is_wrong() -> None:
    req = request()
    wrong = check(req, every=0).check(req, http_answer(RIGHT, name="z")).wrong
    assert wrong is not None and "output 'y': missing from the served response" in str(wrong)


@pytest.mark.parametrize(("protocol", "answer"), ANSWERS)
def test_a_sample_of_answers_is_compared_with_the_parity_tolerances(
    protocol: str, answer: Any
) -> None:
    req = request(protocol)
    checker = check(req, every=3)
    off = RIGHT.copy()
    off[1, 2] += 0.5
    found = [checker.check(req, answer(off)).wrong for _ in range(6)]
    assert [w is not None for w in found] == [False, False, True, False, False, True]
    text = str(found[2])
    assert "output 'y' dtype FP32: max abs diff 0.5" in text
    assert "mismatched 1 / 8" in text
    assert "worst at index (1, 2): served 12.5 vs native 12.0" in text
    assert "(rtol 1.3e-06, atol 1e-05)" in text  # torch.testing's fp32 default
    within = RIGHT + 1e-6  # inside atol 1e-5
    assert all(checker.check(req, answer(within)).wrong is None for _ in range(6))
    assert checker.compared == 4


def test_the_first_wrong_answers_name_the_difference_later_ones_only_say_so() -> None:
    req = request()
    checker = AnswerCheck("brief", [(req, {"v": {"y": RIGHT}})], every=1)
    texts = [str(checker.check(req, http_answer(RIGHT + i + 1)).wrong) for i in range(DETAILED + 3)]
    assert all("max abs diff" in t for t in texts[:DETAILED])
    assert len(set(texts[DETAILED:])) == 1
    assert "output 'y' outside the parity tolerance (the first 5 such answers" in texts[-1]


def test_checks_that_share_a_count_detail_the_first_wrong_answers_of_them_all() -> None:
    """A load run's users share one count (the run's); a check of its own counts alone."""
    req = request()
    shared = WrongSoFar()
    first, second = (
        AnswerCheck("m", [(req, {"v": {"y": RIGHT}})], every=1, wrong_so_far=shared)
        for _ in range(2)
    )
    alone = AnswerCheck("m", [(req, {"v": {"y": RIGHT}})], every=1)
    for i in range(DETAILED):
        assert "max abs diff" in str(first.check(req, http_answer(RIGHT + i + 1)).wrong)
    assert "max abs diff" not in str(second.check(req, http_answer(RIGHT + 9)).wrong)
    assert "max abs diff" in str(alone.check(req, http_answer(RIGHT + 9)).wrong)
    assert shared == {("m", "y:values"): DETAILED + 1}


def test_an_answer_may_match_any_allowed_reference() -> None:
    req = request()
    checker = check(req, every=1, v1={"y": RIGHT}, v2={"y": RIGHT + 1})
    assert checker.check(req, http_answer(RIGHT)).matched == "v1"
    assert checker.check(req, http_answer(RIGHT + 1)).matched == "v2"
    checker.allowed = ("v2",)
    wrong = checker.check(req, http_answer(RIGHT)).wrong
    assert wrong is not None and "(against reference v2)" in str(wrong)
    assert checker.check(req, http_answer(RIGHT + 1)).matched == "v2"


def test_per_row_scalars_travel_as_a_column() -> None:
    """Triton's dims [1] for a per-row scalar: [batch, 1] on the wire, [batch] in PyTorch."""
    req = request()
    native = np.array([0.5, 0.25], np.float32)
    checker = AnswerCheck("m", [(req, {"v": {"y": native}})], every=1)
    assert checker.check(req, http_answer(native.reshape(2, 1))).wrong is None


def test_a_request_it_was_not_told_about_passes() -> None:
    assert check(request(), every=1).check(request(), http_answer(RIGHT + 9)).wrong is None


@pytest.mark.parametrize(("protocol", "answer"), ANSWERS)
def test_a_sampled_answer_equal_to_one_compared_before_is_not_decoded(
    protocol: str, answer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = request(protocol)
    checker = check(req, every=1, v1={"y": RIGHT}, v2={"y": RIGHT + 1})
    decoded: list[object] = []

    def counting(r: PreparedRequest, raw: RawAnswer) -> Any:
        decoded.append(raw)
        return read_answer(r, raw)

    monkeypatch.setattr(answers, "read_answer", counting)
    assert [checker.check(req, answer(RIGHT)).matched for _ in range(4)] == ["v1"] * 4
    assert len(decoded) == 1 and checker.compared == 4
    checker.allowed = ("v2",)  # a version retired: its answers are wrong from now on
    assert checker.check(req, answer(RIGHT)).wrong is not None
    assert len(decoded) == 2


def test_agreement_counts_samples_instead_of_failing_on_rounding() -> None:
    """RIGHT's rows [2, 6] / [10, 14]: each row's best class is its last. A rounded answer
    keeps both classes (2 of 2 agree, no wrong answer, though outside the tolerance), one
    whose second row's best class moved agrees on 1 of 2 (counted, still no wrong answer);
    a remembered all-agreeing answer counts again without decoding."""
    req = request("http")

    def top1(served: Any, reference: Any) -> np.ndarray:
        same = served["y"].argmax(axis=1) == reference["y"].argmax(axis=1)
        return np.asarray(same, dtype=np.float64)

    checker = AnswerCheck("m", [(req, {"v": {"y": RIGHT}})], every=1, agreement=top1)
    rounded = http_answer(RIGHT + np.float32(0.01))
    assert checker.check(req, rounded).wrong is None
    assert (checker.agreed, checker.judged) == (2.0, 2)
    moved = RIGHT.copy()
    moved[1, 0] = 99.0
    assert checker.check(req, http_answer(moved)).wrong is None
    assert (checker.agreed, checker.judged) == (3.0, 4)
    assert checker.check(req, http_answer(RIGHT + np.float32(0.01))).wrong is None
    assert (checker.agreed, checker.judged, checker.compared) == (5.0, 6, 3)
    wrong_shape = checker.check(req, http_answer(RIGHT[:, :2].copy()))
    assert wrong_shape.wrong is not None and checker.judged == 6  # the shape check stays
    tolerant = check(req, every=1)
    assert tolerant.check(req, rounded).wrong is not None  # without it: a wrong answer
