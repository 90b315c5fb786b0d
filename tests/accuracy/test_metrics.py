"""The metrics, intervals and sample rule against values worked out by hand (and against
scikit-learn's own top-k accuracy where it has one)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score, top_k_accuracy_score

from pytest_triton.accuracy import metrics
from pytest_triton.accuracy.check import interval_of
from pytest_triton.accuracy.intervals import bootstrap, samples_needed, wilson
from pytest_triton.accuracy.metrics import Answers, Metric, best_spans, metric_named, span_overlap
from pytest_triton.accuracy.outcome import AccuracyResult

LOGITS = np.array(
    [[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.4, 0.35, 0.25]], dtype=np.float32
)
LABELS = np.array([1, 1, 2, 2])


def test_top_k_equals_scikit_learns_top_k_accuracy() -> None:
    answers = {"out": LOGITS}
    for k in (1, 2):
        expected = top_k_accuracy_score(LABELS, LOGITS, k=k, labels=[0, 1, 2])
        assert metrics.top_k(k).value(answers, LABELS) == pytest.approx(expected)
    assert metrics.top_k(1).value(answers, LABELS) == 0.5


def test_agreement_needs_no_labels_and_is_one_against_itself() -> None:
    reference = {"out": LOGITS}
    served = {"out": LOGITS[:, ::-1].copy()}  # every argmax moved but the middle class
    assert metrics.agreement(1).value(reference, reference) == 1.0
    assert (
        metrics.agreement(1).value(served, reference) == 0.25
    )  # row 0 alone: its best class is the middle one
    assert metrics.agreement(3).value(served, reference) == 1.0


def test_roc_auc_is_scikit_learns_and_indifferent_to_monotone_scores() -> None:
    scores = np.array([0.1, 0.4, 0.35, 0.8])
    labels = np.array([0, 0, 1, 1])
    auc = metrics.roc_auc().value({"p": scores}, labels)
    assert auc == 0.75
    assert metrics.roc_auc().value({"p": np.log(scores)}, labels) == 0.75
    rng = np.random.default_rng(3)  # ties among the scores, and labels 0/1 or -1/1
    y = rng.integers(0, 2, 500)
    p = np.round(rng.random(500), 2)
    for labels in (y, 2 * y - 1):
        expected = roc_auc_score(labels, p + y * 0.1)
        assert metrics.roc_auc().value({"p": p + y * 0.1}, labels) == expected
    with pytest.raises(ValueError, match="two classes, got 1"):  # scikit-learn: nan
        metrics.roc_auc().value({"p": np.arange(4.0)}, np.ones(4))


def test_cosine_of_scaled_rows_is_one_and_of_opposite_rows_minus_one() -> None:
    a = np.array([[1.0, 2.0], [3.0, -1.0], [0.0, 0.0]])
    cos = metrics.cosine().score
    assert cos is not None
    np.testing.assert_allclose(cos({"e": 2 * a}, {"e": a}), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(cos({"e": -a[:2]}, {"e": a[:2]}), [-1.0, -1.0])


def test_span_exact_match_and_f1_as_squad_defines_them() -> None:
    # truth tokens 3..6 (4 tokens); prediction 5..8 (4 tokens): 2 in common
    exact, f1 = span_overlap(
        np.array([[5, 8], [3, 6], [9, 9], [4, 3]]), np.array([[3, 6]] * 3 + [[2, 1]])
    )
    np.testing.assert_allclose(exact, [0.0, 1.0, 0.0, 1.0])  # two empty spans match
    np.testing.assert_allclose(f1, [0.5, 1.0, 0.0, 1.0])
    # P = 1/1, R = 1/4 -> F1 = 2 * 0.25 / 1.25 = 0.4
    assert span_overlap(np.array([[4, 4]]), np.array([[3, 6]]))[1][0] == pytest.approx(0.4)


def test_best_span_keeps_end_after_start_and_within_max_length() -> None:
    start = np.array([[-10.0, 5.0, 0.0, 0.0]])
    end = np.array([[9.0, 0.0, 0.0, 1.0]])  # the best end comes before the best start
    np.testing.assert_array_equal(best_spans(start, end), [[1, 3]])
    np.testing.assert_array_equal(best_spans(start, end, max_length=1), [[1, 1]])


def test_span_metrics_against_labels_or_the_references_spans() -> None:
    logits = {"start_logits": np.eye(4)[[1, 2]], "end_logits": np.eye(4)[[2, 3]]}
    labels = np.array([[1, 2], [2, 2]])
    assert metrics.span_exact_match("labels").value(logits, labels) == 0.5
    assert metrics.span_f1("labels").value(logits, labels) == pytest.approx((1 + 2 / 3) / 2)
    assert metrics.span_f1().value(logits, logits) == 1.0


def test_any_callable_makes_a_metric_and_names_are_refused_clearly() -> None:
    mae = Metric(
        "within_0.1",
        "reference",
        score=lambda a, r: (np.abs(a["y"] - r["y"]) < 0.1).astype(float),
        proportion=True,
    )
    assert mae.value({"y": np.array([0.0, 1.0])}, {"y": np.array([0.05, 0.0])}) == 0.5
    with pytest.raises(ValueError, match="exactly one of score= and whole="):
        Metric("bad", "labels")
    with pytest.raises(ValueError, match=r"no built-in metric 'top3'.*top1"):
        metric_named("top3")
    with pytest.raises(ValueError, match=r"outputs \['a', 'b'\]; name the one"):
        metrics.top_k(1).value({"a": LOGITS, "b": LOGITS}, LABELS)


def test_wilson_interval_by_hand_and_never_zero_wide() -> None:
    low, high = wilson(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-4) and high == pytest.approx(0.5962, abs=1e-4)
    low, high = wilson(50, 50)
    assert high == 1.0 and low == pytest.approx(0.9287, abs=1e-4)
    ci = binomtest(37, 40).proportion_ci(method="wilson")  # scipy's, at 95%
    assert wilson(37, 40) == (ci.low, ci.high)


def test_bootstrap_interval_brackets_the_mean_and_is_reproducible() -> None:
    values = np.random.default_rng(1).normal(0.8, 0.05, 500)
    whole = [np.arange(len(values))]
    first = bootstrap(lambda idx: float(values[idx].mean()), whole)
    assert first == bootstrap(lambda idx: float(values[idx].mean()), whole)
    assert first[0] < values.mean() < first[1] and first[1] - first[0] < 0.02


def test_a_metrics_error_reaches_the_user_from_the_interval() -> None:
    """A user's metric that raises on some draws: its error, not a silently thinner interval
    (the draws that raised were skipped), nor (nan, nan) when every draw raised."""
    labels = np.arange(200) % 2

    def fussy(answers: Answers, truth: Any) -> float:
        if truth[0] == 1:
            raise ValueError("my metric wants the first sample of class 0")
        return float(np.mean(answers["p"] == truth))

    metric = Metric("fussy", "labels", whole=fussy)
    answers = {"p": labels.copy()}
    assert metric.value(answers, labels) == 1.0
    with pytest.raises(ValueError, match="my metric wants the first sample"):
        interval_of(metric, answers, labels, 200)
    always = Metric("always", "labels", whole=lambda a, t: fussy(a, np.ones(1)))
    with pytest.raises(ValueError, match="my metric wants the first sample"):
        interval_of(always, answers, labels, 200)
    undefined = Metric("undefined", "labels", whole=lambda a, t: math.nan)
    with pytest.raises(ValueError, match="not a finite number on 400 of 400 bootstrap draws"):
        interval_of(undefined, answers, labels, 200)


def test_roc_aucs_interval_is_defined_on_every_draw_with_few_positives() -> None:
    """Two positives in 300: one plain draw in seven has none (ROC AUC undefined); the
    bootstrap draws each class apart, so every draw has both."""
    rng = np.random.default_rng(5)
    labels = np.zeros(300, dtype=np.int64)
    labels[[10, 150]] = 1
    scores = rng.random(300) + labels * 0.5
    (low, high), method = interval_of(metrics.roc_auc(), {"p": scores}, labels, 300)
    served = roc_auc_score(labels, scores)
    assert 0.0 <= low <= served <= high <= 1.0 and low < high and method == "bootstrap"


def test_a_proportion_metric_must_score_zero_or_one() -> None:
    half = Metric("half", "labels", score=lambda a, t: np.full(4, 0.5), proportion=True)
    with pytest.raises(ValueError, match=r"'half' says its scores are proportions"):
        interval_of(half, {"p": LOGITS}, LABELS, 4)


def test_samples_needed_for_mlperfs_rules() -> None:
    assert samples_needed(1.0, 0.99) == 100
    assert samples_needed(1.0, 0.999) == 1000
    assert samples_needed(0.97, 0.99) == 104
    assert samples_needed(0.9, 1.0) == 0


def test_result_verdict_threshold_and_message() -> None:
    result = AccuracyResult(
        model="m",
        metric="top1",
        against="labels",
        served=0.90,
        reference=0.98,
        samples=360,
        interval=(0.86, 0.93),
        interval_method="wilson",
        min_ratio=0.99,
        min_value=None,
        worst=("class 7: 0.500 served vs 1.000 reference (n=36)",),
    )
    assert not result.ok and result.threshold == pytest.approx(0.9702)
    text = result.describe()
    for part in ("FAILED", "top1", "0.9000", "0.9800", "threshold 0.9702", "N=360", "class 7"):
        assert part in text, part
    assert "interval [0.8600, 0.9300] (wilson), for reading: the verdict compares the value" in text
    floor = AccuracyResult(**{**result.__dict__, "min_ratio": None, "min_value": 0.85})
    assert floor.ok and floor.rule() == ">= 0.85"
    assert math.isclose(floor.ratio, 0.90 / 0.98)
