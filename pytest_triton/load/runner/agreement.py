"""The run's answer checks under load: every answer check of this process is kept here, and
their counts summed at the end (answers judged against the reference, and with
--triton-min-agreement the agreement rate); workers
send their sums with each statistics report, and the master adds the latest of each, as
generator_cpu.py does with the CPU. No locust import here.

A reduced-precision variant's compared answers are scored by top-1 agreement with the fp32
reference (pytest_triton.accuracy.metrics.agreement, per output; a sample agrees when all of
its outputs do) instead of the parity tolerance: rounding is not a wrong answer, a changed
class is counted, and the verdict judges the rate (load/measure/targets.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_triton.accuracy.metrics import agreement as agreement_metric
from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import ConfigError
from pytest_triton.load.runner.run_state import StateKey, run_state
from pytest_triton.parity.answers import Agreement, AnswerCheck, Outputs

REPORT_KEY = "pytest_triton_agreement"


@dataclass
class AgreementTally:
    """This process's answer checks, and each worker's latest sums (on a master): (samples
    that agree, samples judged by agreement, answers judged against the reference)."""

    checks: list[AnswerCheck] = field(default_factory=list)
    workers: dict[str, tuple[float, int, int]] = field(default_factory=dict)

    def own(self) -> tuple[float, int, int]:
        """(samples that agree, samples judged, answers checked) of this process's checks."""
        return (
            sum(c.agreed for c in self.checks),
            sum(c.judged for c in self.checks),
            sum(c.compared for c in self.checks),
        )

    def total(self) -> tuple[float, int, int]:
        """This process's sums and its workers'."""
        agreed, judged, checked = self.own()
        for a, j, c in self.workers.values():
            agreed, judged, checked = agreed + a, judged + j, checked + c
        return agreed, judged, checked

    def reset(self, **_: Any) -> None:
        for check in self.checks:
            check.agreed, check.judged, check.compared = 0.0, 0, 0
        self.workers.clear()

    def on_report_to_master(self, data: dict[str, Any], **_: Any) -> None:
        data[REPORT_KEY] = list(self.own())

    def on_worker_report(self, client_id: str, data: Mapping[str, Any], **_: Any) -> None:
        if REPORT_KEY in data:
            agreed, judged, *checked = data[REPORT_KEY]
            self.workers[client_id] = (float(agreed), int(judged), int(sum(checked)))


TALLY = StateKey[AgreementTally]("answers judged by agreement")


def attach_agreement_tally(environment: Any) -> AgreementTally:
    """The environment's tally, made (and its report listeners added) on first use."""
    tally = run_state(environment).get(TALLY)
    if tally is None:
        tally = AgreementTally()
        run_state(environment)[TALLY] = tally
        events = environment.events
        events.report_to_master.add_listener(tally.on_report_to_master)
        events.worker_report.add_listener(tally.on_worker_report)
        events.reset_stats.add_listener(tally.reset)
    return tally


def agreement_counts(environment: Any) -> tuple[float, int]:
    """(samples that agree, samples judged) of the whole run: (0.0, 0) where none were."""
    tally = run_state(environment).get(TALLY)
    return tally.total()[:2] if tally is not None else (0.0, 0)


def answers_checked(environment: Any) -> int | None:
    """Answers judged against the reference in the whole run; None where no user checks."""
    tally = run_state(environment).get(TALLY)
    if tally is None or not (tally.checks or tally.workers):
        return None
    return tally.total()[2]


def count_in_rate(environment: Any, check: AnswerCheck | None) -> None:
    """Count a user's check in the run's tallies (and rate, where it judges by agreement)."""
    if check is not None:
        attach_agreement_tally(environment).checks.append(check)


def top1_agreement(reference: Outputs) -> Agreement:
    """The scorer: a sample agrees when, in every output, the served answer's best class is
    the reference's (accuracy.metrics.agreement(1, output) for each). Refused where an output
    has one value per sample (a probability has no class to agree on: judge such a model by
    its metric with assert_accuracy, e.g. ROC AUC)."""
    single = sorted(
        n for n, a in reference.items() if int(np.prod(a.shape[1:], dtype=np.int64)) < 2
    )
    if single:
        raise ConfigError(
            f"--triton-min-agreement judges top-1 agreement, and outputs {single} have one "
            "value per sample (no class to agree on): leave the target unset for this model "
            "and judge it by its metric (assert_accuracy, e.g. roc_auc)"
        )
    scorers = [m.score for m in (agreement_metric(1, n) for n in sorted(reference)) if m.score]

    def score(served: Outputs, reference: Outputs) -> Array:
        scores = [np.asarray(s(served, reference)) for s in scorers]
        agreed: Array = np.minimum.reduce(scores)
        return agreed

    return score
