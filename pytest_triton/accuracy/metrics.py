"""Metrics as data: each says what it compares the served answers with (the dataset's labels
or the reference's answers), how it scores one sample, and whether its scores are proportions
(0 or 1 per sample: a Wilson interval) or means of other values (a bootstrap interval).

Every built-in metric is a mean of per-sample scores in [0, 1], except ROC AUC, a value of the
whole set; any callable that scores samples makes a metric (`Metric(name, score=...)`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from pytest_triton.base.dtypes import Array

Answers = Mapping[str, Array]  # every output of the whole dataset, rows in dataset order
Against = Literal["labels", "reference"]
# (candidate answers, truth) -> one score per sample; truth: the labels, or the reference's answers
Scorer = Callable[[Answers, Any], Array]
WholeScorer = Callable[[Answers, Any], float]


@dataclass(frozen=True)
class Metric:
    """One accuracy metric. `score` gives per-sample scores whose mean is the metric; `whole`
    computes metrics that are not a mean (ROC AUC). `classes`: the truth is a class id per
    sample, so a failure names the classes the served model loses most on, and the
    interval's bootstrap draws keep each class's count. What a metric raises reaches the
    caller."""

    name: str
    against: Against
    score: Scorer | None = None
    whole: WholeScorer | None = None
    proportion: bool = False
    classes: bool = False

    def __post_init__(self) -> None:
        if (self.score is None) == (self.whole is None):
            raise ValueError(f"metric {self.name!r}: give exactly one of score= and whole=")
        if self.against not in ("labels", "reference"):
            raise ValueError(
                f"metric {self.name!r}: against must be 'labels' or 'reference', "
                f"got {self.against!r}"
            )

    def value(self, answers: Answers, truth: Any) -> float:
        """The metric over the whole set."""
        if self.whole is not None:
            return float(self.whole(answers, truth))
        assert self.score is not None
        return float(np.mean(self.score(answers, truth)))


def pick_output(answers: Answers, output: str | None, metric: str) -> Array:
    """The output a metric reads: the named one, or the only one."""
    if output is None:
        if len(answers) != 1:
            raise ValueError(
                f"metric {metric!r}: the model has outputs {sorted(answers)}; "
                "name the one to score with output="
            )
        return np.asarray(next(iter(answers.values())))
    if output not in answers:
        raise ValueError(f"metric {metric!r}: no output {output!r} among {sorted(answers)}")
    return np.asarray(answers[output])


def _rows(array: Array) -> Array:
    rows: Array = array.reshape(array.shape[0], -1)
    return rows


def _in_top_k(scores: Array, truth: Array, k: int) -> Array:
    """1.0 where the truth's class is among the row's k highest scores."""
    rows = _rows(scores)
    k = min(k, rows.shape[1])
    top = np.argpartition(-rows, k - 1, axis=1)[:, :k]
    hits: Array = (top == truth.reshape(-1, 1).astype(np.int64)).any(axis=1)
    return hits.astype(np.float64)


def top_k(k: int = 1, output: str | None = None) -> Metric:
    """Top-k accuracy against class labels (ImageNet's top-1 / top-5)."""

    def score(answers: Answers, labels: Any) -> Array:
        return _in_top_k(pick_output(answers, output, f"top{k}"), np.asarray(labels), k)

    return Metric(f"top{k}", "labels", score=score, proportion=True, classes=True)


def agreement(k: int = 1, output: str | None = None) -> Metric:
    """Top-k agreement with the reference, no labels needed: a sample agrees when the
    reference's top-1 class is among the served model's k best."""

    def score(answers: Answers, reference: Any) -> Array:
        truth = np.argmax(_rows(pick_output(reference, output, "agreement")), axis=1)
        return _in_top_k(pick_output(answers, output, "agreement"), truth, k)

    name = f"top{k}_agreement" + (f"[{output}]" if output else "")
    return Metric(name, "reference", score=score, proportion=True)


def roc_auc(output: str | None = None) -> Metric:
    """ROC AUC against 0/1 labels (DLRM's click prediction): scikit-learn's roc_auc_score.
    A class metric: the interval's bootstrap draws keep each class's count, so that every
    draw has both."""

    def whole(answers: Answers, labels: Any) -> float:
        from sklearn.metrics import roc_auc_score

        truth = np.asarray(labels).reshape(-1)
        classes = np.unique(truth)
        if classes.size != 2:  # scikit-learn warns and answers nan
            raise ValueError(
                f"ROC AUC needs labels of two classes, got {classes.size} ({classes[:5].tolist()})"
            )
        predicted = pick_output(answers, output, "roc_auc").reshape(-1)
        return float(roc_auc_score(truth, predicted))

    return Metric("roc_auc", "labels", whole=whole, classes=True)


def cosine(output: str | None = None) -> Metric:
    """Cosine similarity of each sample's output with the reference's (embeddings)."""

    def score(answers: Answers, reference: Any) -> Array:
        a = _rows(pick_output(answers, output, "cosine").astype(np.float64))
        b = _rows(pick_output(reference, output, "cosine").astype(np.float64))
        norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        dots = np.einsum("ij,ij->i", a, b)
        same_zero = (norms == 0) & (np.abs(a).sum(axis=1) == np.abs(b).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
        return np.where(same_zero, 1.0, np.clip(cos, -1.0, 1.0))

    return Metric("cosine" + (f"[{output}]" if output else ""), "reference", score=score)


# -- SQuAD-style spans ------------------------------------------------------------------------


def best_spans(start_logits: Array, end_logits: Array, max_length: int = 30) -> Array:
    """Each row's answer span (start, end) as token positions: the pair with the highest
    start + end logit among end >= start and end - start < max_length (BERT's SQuAD
    post-processing, over all positions)."""
    start = _rows(np.asarray(start_logits, dtype=np.float64))
    end = _rows(np.asarray(end_logits, dtype=np.float64))
    n = start.shape[1]
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    allowed = (j >= i) & (j - i < max_length)
    total = np.where(allowed, start[:, :, None] + end[:, None, :], -np.inf)
    flat = total.reshape(total.shape[0], -1).argmax(axis=1)
    return np.stack([flat // n, flat % n], axis=1)


def span_overlap(predicted: Array, truth: Array) -> tuple[Array, Array]:
    """Per sample: exact match (1/0) and token F1 of two (start, end) spans, inclusive.

    SQuAD's evaluation compares the predicted and true answers' tokens: exact match when
    they are equal, F1 = 2PR/(P+R) with P = common/len(predicted), R = common/len(truth).
    Over token positions of one passage the common tokens are the overlap of the ranges; an
    empty span (end < start, no answer) matches only an empty span, as SQuAD 2.0 scores it."""
    p = np.asarray(predicted, dtype=np.int64).reshape(-1, 2)
    t = np.asarray(truth, dtype=np.int64).reshape(-1, 2)
    p_len = np.maximum(p[:, 1] - p[:, 0] + 1, 0)
    t_len = np.maximum(t[:, 1] - t[:, 0] + 1, 0)
    common = np.maximum(np.minimum(p[:, 1], t[:, 1]) - np.maximum(p[:, 0], t[:, 0]) + 1, 0)
    common = np.where((p_len > 0) & (t_len > 0), common, 0)
    both_empty = (p_len == 0) & (t_len == 0)
    exact = np.where(both_empty, 1.0, ((p == t).all(axis=1) & (p_len > 0)).astype(np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = common / np.where(p_len > 0, p_len, 1)
        recall = common / np.where(t_len > 0, t_len, 1)
        f1 = np.where(common > 0, 2 * precision * recall / (precision + recall), 0.0)
    return exact, np.where(both_empty, 1.0, f1)


def _span_metric(
    name: str, which: int, against: Against, start: str, end: str, max_length: int
) -> Metric:
    def spans_of(answers: Answers) -> Array:
        return best_spans(
            pick_output(answers, start, name), pick_output(answers, end, name), max_length
        )

    def score(answers: Answers, truth: Any) -> Array:
        expected = spans_of(truth) if against == "reference" else np.asarray(truth)
        return span_overlap(spans_of(answers), expected)[which]

    return Metric(name, against, score=score, proportion=which == 0)


def span_exact_match(
    against: Against = "reference",
    start: str = "start_logits",
    end: str = "end_logits",
    max_length: int = 30,
) -> Metric:
    """SQuAD exact match of the answer spans, against (start, end) labels or the reference's
    own spans."""
    return _span_metric("span_exact_match", 0, against, start, end, max_length)


def span_f1(
    against: Against = "reference",
    start: str = "start_logits",
    end: str = "end_logits",
    max_length: int = 30,
) -> Metric:
    """SQuAD token F1 of the answer spans, against (start, end) labels or the reference's."""
    return _span_metric("span_f1", 1, against, start, end, max_length)


BUILT_IN: Mapping[str, Callable[[], Metric]] = {
    "top1": lambda: top_k(1),
    "top5": lambda: top_k(5),
    "top1_agreement": lambda: agreement(1),
    "top5_agreement": lambda: agreement(5),
    "roc_auc": roc_auc,
    "cosine": cosine,
    "span_exact_match": span_exact_match,
    "span_f1": span_f1,
}


def metric_named(metric: Metric | str) -> Metric:
    """A metric given by value or by its built-in name."""
    if isinstance(metric, Metric):
        return metric
    if metric not in BUILT_IN:
        raise ValueError(
            f"no built-in metric {metric!r}: use one of {sorted(BUILT_IN)}, or a Metric "
            "(pytest_triton.accuracy.metrics) built around any scoring callable"
        )
    return BUILT_IN[metric]()
