"""Synthetic click logs for DLRM with no download: inputs shaped like Criteo's (13 numerical
features, 26 categorical ones), and clicks drawn from a known model, the zoo's fp32 DLRM:
each sample is clicked with probability sigmoid(SHARPNESS x z), z its DLRM logit
standardised over the log, Bernoulli with a fixed seed.

So a served model's ROC AUC on these labels means "ranks the samples as the generating
model does", not "predicts real clicks": the generating model itself scores the best AUC
this data allows (0.91 at the default sharpness), a model with other weights about 0.5.
The zoo's DLRM is untrained: its logits spread little, so they are standardised first and
SHARPNESS sets how clearly the clicks follow them (0 would make every label a coin toss).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from pytest_triton.base.dtypes import Array
from pytest_triton.models import dlrm

SAMPLES = 2048
SEED = 0  # the inputs' and the clicks' generator
MODEL_SEED = 0  # the generating DLRM's weights: the zoo's (zoo_spec("dlrm") builds seed 0)
SHARPNESS = 3.0


@dataclass(frozen=True)
class ClickLogs:
    """Inputs by name, rows in log order, with each row's click (0/1) and the probability
    it was drawn with."""

    inputs: dict[str, Array]
    clicks: Array  # [N] int64
    probability: Array  # [N] float64

    def __len__(self) -> int:
        return int(self.clicks.shape[0])

    def batches(self, batch_size: int = 256) -> list[tuple[dict[str, Array], Array]]:
        """(inputs, clicks) batches in order: a dataset for assert_accuracy's roc_auc."""
        return [
            (
                {name: a[i : i + batch_size] for name, a in self.inputs.items()},
                self.clicks[i : i + batch_size],
            )
            for i in range(0, len(self), batch_size)
        ]


def draw(
    samples: int = SAMPLES,
    config: dlrm.Config | None = None,
    *,
    seed: int = SEED,
    model_seed: int = MODEL_SEED,
    sharpness: float = SHARPNESS,
) -> ClickLogs:
    """`samples` rows of click logs drawn from the fp32 DLRM of `config` (the zoo's small one
    by default) built with `model_seed`."""
    if samples < 2:
        raise ValueError(f"click logs need at least 2 samples to rank, got {samples}")
    config = config or dlrm.Config.small()
    model = dlrm.build(config, seed=model_seed)
    return drawn_from(model, dlrm.example_inputs(config, samples, seed=seed), seed, sharpness)


def drawn_from(
    model: torch.nn.Module,
    inputs: Mapping[str, torch.Tensor],
    seed: int = SEED,
    sharpness: float = SHARPNESS,
) -> ClickLogs:
    """Clicks for `inputs` drawn from `model`'s click probabilities (one per row, its only
    output): any DLRM, e.g. a ModelSpec's own module on its generated inputs."""
    with torch.inference_mode():
        probability = model(**inputs).reshape(-1).double()
    logit = torch.logit(probability, eps=1e-12)
    spread = logit.std()
    z = (logit - logit.mean()) / (spread if spread > 0 else 1.0)
    chance = torch.sigmoid(sharpness * z)
    gen = torch.Generator().manual_seed(seed + 1)  # not the inputs' stream
    clicks = torch.bernoulli(chance, generator=gen).long()
    return ClickLogs(
        {name: t.numpy() for name, t in inputs.items()}, clicks.numpy(), chance.numpy()
    )


def generating_auc(logs: ClickLogs) -> float:
    """ROC AUC of the generating probabilities on the drawn clicks: the best this data allows."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(logs.clicks, np.asarray(logs.probability)))
