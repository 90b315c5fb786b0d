"""assert_accuracy: the whole dataset sent to the served model with requests in flight
together, the same metric computed for its answers and for the fp32 reference's on the same
data, judged by an MLPerf-style rule (served >= min_ratio x reference, and/or an absolute
floor). Measure (send, reference), judge (values, interval, worst), then raise."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from pytest_triton.accuracy.dataset import Batch, check_batches, read_batches
from pytest_triton.accuracy.intervals import bootstrap, samples_needed, wilson
from pytest_triton.accuracy.metrics import Answers, Metric, metric_named
from pytest_triton.accuracy.outcome import AccuracyResult, asserting
from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import DatasetError
from pytest_triton.client.triton_client import TritonClient

Reference = Callable[[Mapping[str, Array]], Mapping[str, Any]]
IN_FLIGHT = 8  # requests sent together: enough for the dynamic batcher to combine them
WORST_SHOWN = 5


def _joined(parts: Sequence[Mapping[str, Any]]) -> dict[str, Array]:
    """The answers of all batches, each output's rows in dataset order."""
    return {name: np.concatenate([np.asarray(p[name]) for p in parts]) for name in parts[0]}


def served_answers(
    client: TritonClient,
    model: str,
    batches: Sequence[Batch],
    outputs: Sequence[str] | None,
    in_flight: int,
    version: str = "",
) -> dict[str, Array]:
    """Every batch sent, `in_flight` requests at a time through the client's infer_many."""
    answers: list[dict[str, Array]] = []
    for start in range(0, len(batches), in_flight):
        group = [b.inputs for b in batches[start : start + in_flight]]
        answers += client.infer_many(model, group, outputs, version)
    return _joined(answers)


def reference_answers(reference: Reference, batches: Sequence[Batch]) -> dict[str, Array]:
    return _joined([reference(b.inputs) for b in batches])


def _subset(value: Any, index: Array) -> Any:
    if isinstance(value, Mapping):
        return {k: np.asarray(v)[index] for k, v in value.items()}
    return np.asarray(value)[index]


def interval_of(
    metric: Metric, answers: Answers, truth: Any, n: int
) -> tuple[tuple[float, float], str]:
    """95% interval of the metric's value on this data (reported; the verdict compares the
    value itself with the threshold). A class metric's bootstrap keeps each class's count."""
    strata = [np.arange(n)]
    if metric.classes and metric.against == "labels":
        classes = np.asarray(truth).reshape(n, -1)[:, 0]
        strata = [np.flatnonzero(classes == c) for c in np.unique(classes)]
    if metric.score is not None:
        scores = np.asarray(metric.score(answers, truth), dtype=np.float64)
        if metric.proportion:
            if not np.isin(scores, (0.0, 1.0)).all():
                raise ValueError(
                    f"metric {metric.name!r} says its scores are proportions (proportion=True) "
                    "but scores a sample other than 0 or 1: drop proportion=True for a mean "
                    "of other values"
                )
            return wilson(int(scores.sum()), n), "wilson"
        return bootstrap(lambda idx: float(scores[idx].mean()), strata), "bootstrap"
    return bootstrap(
        lambda idx: metric.value(_subset(answers, idx), _subset(truth, idx)), strata
    ), "bootstrap"


def worst_places(
    metric: Metric,
    served: Answers,
    reference: Answers,
    served_truth: Any,
    reference_truth: Any,
    labels: Array | None,
) -> tuple[str, ...]:
    """Where the served model loses most against the reference: classes by their drop in the
    metric (class metrics), else samples by their drop in score."""
    if metric.score is None:
        return ()
    got = np.asarray(metric.score(served, served_truth), dtype=np.float64)
    ref = np.asarray(metric.score(reference, reference_truth), dtype=np.float64)
    if metric.classes and labels is not None:
        classes = labels.reshape(-1)
        rows = []
        for c in np.unique(classes):
            at = classes == c
            rows.append(
                (ref[at].mean() - got[at].mean(), c, got[at].mean(), ref[at].mean(), at.sum())
            )
        rows.sort(key=lambda r: -r[0])
        return tuple(
            f"class {c}: {g:.3f} served vs {r:.3f} reference (n={n})"
            for drop, c, g, r, n in rows[:WORST_SHOWN]
            if drop > 0
        )
    drops = ref - got
    order = np.argsort(-drops, kind="stable")[:WORST_SHOWN]
    return tuple(
        f"sample {i}: {got[i]:.3f} served vs {ref[i]:.3f} reference" for i in order if drops[i] > 0
    )


def measure_accuracy(
    client: TritonClient,
    model: str,
    dataset: Iterable[Any],
    metric: Metric | str,
    reference: Reference,
    *,
    min_ratio: float | None = 0.99,
    min_value: float | None = None,
    min_samples: int | None = None,
    outputs: Sequence[str] | None = None,
    in_flight: int = IN_FLIGHT,
    version: str = "",
    cast: Callable[[Mapping[str, Array]], Mapping[str, Array]] | None = None,
) -> AccuracyResult:
    """The check's result, judged but not raised (assert_accuracy raises): the served
    model's metric against `min_ratio` x the reference's (and/or `min_value`).

    `reference` maps one batch's inputs to the fp32 PyTorch answers by output name
    (ServedModel.assert_accuracy passes its native model). Refused before any request, as a
    DatasetError: batches that do not fit the model's inputs (the input named), a label metric
    without labels, and fewer samples than the rule needs (`min_samples` overrides that
    count, e.g. for a smoke check that says so). `cast`: the inputs as the served model takes
    them on the wire (half floats for an fp16 variant); the reference gets them as given."""
    chosen = metric_named(metric)
    if min_ratio is None and min_value is None:
        raise DatasetError("no rule: give min_ratio, min_value or both")
    metadata = client.model_metadata(model, version)
    batches = read_batches(dataset, [i["name"] for i in metadata.get("inputs", [])])
    labels: Array | None = None
    if chosen.against == "labels":
        if any(b.labels is None for b in batches):
            raise DatasetError(
                f"metric {chosen.name} is scored against labels and the dataset has none: "
                "give each batch as (inputs, labels), or use an agreement metric"
            )
        labels = np.concatenate([np.asarray(b.labels) for b in batches])
    wire = [Batch(dict(cast(b.inputs)), b.labels) for b in batches] if cast else batches
    check_batches(wire, metadata)
    n = sum(b.rows for b in batches)
    expected = reference_answers(reference, batches)
    reference_truth: Any = labels if chosen.against == "labels" else expected
    reference_value = chosen.value(expected, reference_truth)
    needed = (
        min_samples
        if min_samples is not None
        else (samples_needed(reference_value, min_ratio) if min_ratio is not None else 0)
    )
    if n < needed:
        raise DatasetError(
            f"{n} samples cannot judge {chosen.name} >= {min_ratio} x reference "
            f"({reference_value:.4f}): one sample weighs {1 / n:.4f}, more than the "
            f"{(1 - (min_ratio or 1)) * reference_value:.4f} the rule allows to lose; the rule "
            f"needs at least {needed} samples"
        )
    served = served_answers(client, model, wire, outputs, in_flight, version)
    served_truth: Any = labels if chosen.against == "labels" else expected
    interval, method = interval_of(chosen, served, served_truth, n)
    result = AccuracyResult(
        model=model,
        metric=chosen.name,
        against=chosen.against,
        served=chosen.value(served, served_truth),
        reference=reference_value,
        samples=n,
        interval=interval,
        interval_method=method,
        min_ratio=min_ratio,
        min_value=min_value,
    )
    if result.ok:
        return result
    worst = worst_places(chosen, served, expected, served_truth, reference_truth, labels)
    return dataclasses.replace(result, worst=worst)


assert_accuracy = asserting(
    measure_accuracy,
    "assert_accuracy",
    """Raise AssertionError naming the metric, both values, the threshold and where the
    served model loses most when its metric falls below `min_ratio` x the reference's
    (and/or below `min_value`); see measure_accuracy. Returns the result.""",
)
