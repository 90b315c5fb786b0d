"""The accuracy constraint of a search with precision as a dimension: which data a candidate
is judged on, by which metric, and the share of fp32 PyTorch's metric it must keep (MLPerf's
rule). A reduced-precision candidate (int8, fp16) cannot pass element-wise parity by design;
this is what it is judged by instead. No locust import here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_triton.accuracy.metrics import Metric, agreement
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.importing import load_object
from pytest_triton.repository.spec import ModelSpec

GENERATED_BATCHES = 12  # x 32 rows: 384 samples, enough to judge 0.99 of a top-1 near 1.0
GENERATED_ROWS = 32
CLICK_LOG_ROWS = 2048  # models/click_logs.py's default log
DATASETS = ("digits", "generated", "click-logs")

Dataset = tuple[list[Any], Metric | str]


@dataclass(frozen=True)
class AccuracyRule:
    """--min-accuracy-ratio on --accuracy-dataset."""

    min_ratio: float
    dataset: str = "generated"

    def describe(self) -> str:
        return f"accuracy >= {self.min_ratio:g} x fp32 PyTorch on {self.dataset}"

    def load(self, spec: ModelSpec) -> Dataset:
        """The batches and the metric, made once per search."""
        return dataset_named(self.dataset, spec)


def dataset_named(name: str, spec: ModelSpec) -> Dataset:
    """digits: the held-out digits with their labels, top-1 (a model trained on them);
    generated: the spec's generated inputs, top-1 agreement with fp32 PyTorch on its first
    output (no labels needed); click-logs: 2,048 of the spec's generated inputs with clicks
    drawn from its own fp32 module's probabilities (a DLRM, models/click_logs.py), ROC AUC;
    MODULE:CALLABLE: called with the spec, returns (batches, metric)."""
    if name == "digits":
        from pytest_triton.models import digits

        return list(digits.load().batches(GENERATED_ROWS)), "top1"
    if name == "click-logs":
        return click_logs_of(spec), "roc_auc"
    if name == "generated":
        batches = [
            dict(spec.make_inputs(GENERATED_ROWS, seed)) for seed in range(GENERATED_BATCHES)
        ]
        return batches, agreement(1, spec.output_names[0])
    if ":" in name:
        factory: Callable[[ModelSpec], Dataset] = load_object(name)
        return factory(spec)
    raise ConfigError(
        f"accuracy dataset {name!r}: use {', '.join(DATASETS)} or MODULE:CALLABLE returning "
        "(batches, metric)"
    )


def click_logs_of(spec: ModelSpec) -> list[Any]:
    """(inputs, clicks) batches of click logs drawn from the spec's fp32 module."""
    import torch

    from pytest_triton.models import click_logs

    if len(spec.output_names) != 1:
        raise ConfigError(
            f"accuracy dataset click-logs draws clicks from one probability per row: model "
            f"{spec.name!r} has outputs {', '.join(spec.output_names)}; give MODULE:CALLABLE"
        )
    inputs = {n: torch.from_numpy(a) for n, a in spec.make_inputs(CLICK_LOG_ROWS, 0).items()}
    return click_logs.drawn_from(spec.torch_module(), inputs).batches(256)


def rule_for(
    precisions: tuple[str, ...], min_ratio: float | None, dataset: str | None
) -> AccuracyRule | None:
    """The search's rule; refused when a reduced precision is searched without one (it has
    nothing else to be judged by) or a dataset is given without a ratio."""
    reduced = [p for p in precisions if p != "fp32"]
    if min_ratio is None:
        if reduced:
            raise ConfigError(
                f"precision {', '.join(reduced)} is judged by accuracy, not element-wise "
                "parity: give --min-accuracy-ratio (e.g. 0.99) and --accuracy-dataset "
                f"({', '.join(DATASETS)} or MODULE:CALLABLE)"
            )
        if dataset is not None:
            raise ConfigError("--accuracy-dataset needs --min-accuracy-ratio (e.g. 0.99)")
        return None
    return AccuracyRule(min_ratio, dataset or "generated")
