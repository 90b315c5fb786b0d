"""What triton-tune writes: every candidate as CSV, markdown and JSON, the Pareto plot of
throughput against p99, the best config.pbtxt and its unified diff against the committed one,
and the gate check. No locust import here."""

from __future__ import annotations

import csv
import difflib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_triton.load.tune.accuracy_rule import AccuracyRule
from pytest_triton.load.tune.strategy import (
    Constraints,
    Objective,
    Trial,
    best_trial,
    committed_trial,
    pareto_front,
)

CSV_FILE = "candidates.csv"
MARKDOWN_FILE = "candidates.md"
JSON_FILE = "tune.json"
PLOT_FILE = "pareto.png"
BEST_CONFIG = "config.pbtxt"
DIFF_FILE = "config.diff"


@dataclass
class GateCheck:
    """--gate-within: the committed configuration against the best one found."""

    within_percent: float
    passed: bool
    shortfall_percent: float | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "within_percent": self.within_percent,
            "passed": self.passed,
            "shortfall_percent": self.shortfall_percent,
            "message": self.message,
        }


@dataclass
class Outcome:
    """What a search found; `committed` is the committed configuration's best trial."""

    model: str
    unit: str
    objective: Objective
    constraints: Constraints
    mode: str
    request_batch: int
    trials: list[Trial]
    seconds: float
    stopped: str = ""
    slo_ms: float | None = None
    accuracy: AccuracyRule | None = None
    gate: GateCheck | None = None
    best_config: str | None = None
    committed_config: str | None = None
    committed_source: str = ""  # where the committed configuration came from
    committed_file: str = "committed/config.pbtxt"  # the diff's name for it
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> Trial | None:
        return best_trial(self.trials, self.objective, self.constraints)

    @property
    def committed(self) -> Trial | None:
        """The committed configuration at its best measured concurrency."""
        return committed_trial(self.trials, self.objective, self.constraints)

    @property
    def committed_failed(self) -> Trial | None:
        """The committed configuration's trial where it failed requests under load (what is
        deployed fails: the run fails, whatever a better candidate does)."""
        return next(
            (
                t
                for t in self.trials
                if t.committed and t.status == "disqualified" and t.failed_requests
            ),
            None,
        )

    def summary(self) -> list[str]:
        lines = []
        best, committed = self.best, self.committed
        measured = sum(t.status == "measured" for t in self.trials)
        disqualified = [t for t in self.trials if t.status == "disqualified"]
        lines.append(
            f"{len(self.trials)} candidates in {self.seconds:.0f} s ({self.mode} search): "
            f"{measured} measured, {len(disqualified)} disqualified by "
            f"{'parity or accuracy' if self.accuracy else 'parity'} or failed requests, "
            f"{sum(t.status == 'failed' for t in self.trials)} failed; objective "
            f"{self.objective}, constraints: {self.constraints.describe()}"
            + (f", {self.accuracy.describe()}" if self.accuracy else "")
        )
        if self.stopped:
            lines.append(f"stopped early: {self.stopped}")
        if committed is not None:
            lines.append(f"committed: {describe(committed, self.unit)}")
        if best is None:
            lines.append("best: no candidate meets every constraint")
        else:
            lines.append(f"best:      {describe(best, self.unit)}")
            if committed is not None and committed.feasible and best is not committed:
                lines.append(
                    f"gain over the committed configuration: "
                    f"{gain_percent(committed, best, self.objective):+.1f}% {self.objective}"
                )
        batching = batching_refused(self.trials, best, self.unit)
        if batching:
            lines.append(batching)
        for t in disqualified:
            if not (batching and t.candidate.dynamic_batching):
                lines.append(
                    f"DISQUALIFIED #{t.index} {t.candidate.label()}: {first_line(t.message)}"
                )
        lines += self.notes
        broken = self.committed_failed
        if broken is not None:
            lines.append(
                f"FAIL: the committed configuration failed requests under load: "
                f"{first_line(broken.message)}"
            )
        if self.gate is not None:
            lines.append(("GATE PASS: " if self.gate.passed else "GATE FAIL: ") + self.gate.message)
        return lines

    def as_dict(self) -> dict[str, Any]:
        best, committed = self.best, self.committed
        return {
            "tune": {
                "model": self.model,
                "unit": self.unit,
                "objective": self.objective,
                "constraints": {
                    "perf_latency_p99": self.constraints.max_p99_ms,
                    "perf_throughput": self.constraints.min_throughput,
                    "max_memory_mb": self.constraints.max_memory_mb,
                },
                "slo_ms": self.slo_ms,
                "accuracy": (
                    {"min_ratio": self.accuracy.min_ratio, "dataset": self.accuracy.dataset}
                    if self.accuracy
                    else None
                ),
                "mode": self.mode,
                "request_batch_size": self.request_batch,
                "seconds": self.seconds,
                "stopped": self.stopped or None,
                "committed_source": self.committed_source,
            },
            "candidates": [t.as_dict() for t in self.trials],
            "best": best.as_dict() if best else None,
            "committed": committed.as_dict() if committed else None,
            "pareto": [t.index for t in pareto_front(self.trials)],
            "gate": self.gate.as_dict() if self.gate else None,
            "best_config": self.best_config,
        }


def _finite(value: Any) -> Any:
    """NaN (a figure not measured) as null: the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def batching_refused(trials: list[Trial], best: Trial | None, unit: str) -> str:
    """One line when every dynamic-batching candidate changed answers and an unbatched one
    was measured (a model whose rows depend on their batch): the per-candidate list would
    repeat one mismatch, and the recommendation is then an unbatched configuration. ''
    otherwise."""
    batched = [t for t in trials if t.candidate.dynamic_batching]
    unbatched = [t for t in trials if not t.candidate.dynamic_batching and t.status == "measured"]
    if not batched or not unbatched or any(t.status != "disqualified" for t in batched):
        return ""
    first = batched[0]
    recommended = (
        f"the best unbatched configuration, {describe(best, unit)}"
        if best is not None
        else "no unbatched configuration meets every constraint"
    )
    return (
        f"DISQUALIFIED {', '.join(f'#{t.index}' for t in batched)}: every dynamic-batching "
        f"candidate changes answers (#{first.index} {first.candidate.label()}: "
        f"{first_line(first.message)}); recommended: {recommended}"
    )


def first_line(text: str) -> str:
    """A message on one line (a parity mismatch spans several)."""
    return " ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def describe(trial: Trial, unit: str) -> str:
    text = f"#{trial.index} {trial.candidate.label()}"
    if trial.status != "measured":
        return f"{text}: {trial.status}: {first_line(trial.message)}"
    text += f": {trial.throughput:,.1f} {unit}, p99 {trial.p99_ms:.2f} ms"
    if not math.isnan(trial.accuracy_ratio):
        text += f", accuracy ratio {trial.accuracy_ratio:.4f} ({trial.accuracy})"
    if not math.isnan(trial.spread):
        text += f", spread {100 * trial.spread:.0f}%"
    if trial.measurements:
        text += f" (medians of {len(trial.measurements)} measurements)"
    if not math.isnan(trial.within_slo):
        text += f", {100 * trial.within_slo:.1f}% within SLO"
    if trial.violations:
        text += " (breaks " + "; ".join(trial.violations) + ")"
    return text


def gain_percent(committed: Trial, best: Trial, objective: Objective) -> float:
    """How much better the best is, in percent of the committed figure (p99: lower)."""
    a, b = committed.value(objective), best.value(objective)
    if objective == "p99":
        return 100 * (a - b) / a if a else math.nan
    return 100 * (b - a) / a if a else math.inf


def gate_check(outcome: Outcome, within_percent: float) -> GateCheck:
    """The committed configuration must be within `within_percent` of the best one found on
    the objective (and meet the constraints and parity itself)."""
    committed, best = outcome.committed, outcome.best
    objective = outcome.objective
    if committed is None:
        return GateCheck(within_percent, False, None, "the committed configuration was not tried")
    if committed.status != "measured":
        return GateCheck(
            within_percent,
            False,
            None,
            f"the committed configuration was {committed.status}: {first_line(committed.message)}",
        )
    if committed.violations:
        return GateCheck(
            within_percent,
            False,
            None,
            "the committed configuration breaks its constraints: "
            + "; ".join(committed.violations),
        )
    assert best is not None  # the committed one is feasible
    a, b = committed.value(objective), best.value(objective)
    if objective == "p99":
        shortfall = 100 * (a - b) / a if a else 0.0  # the best's p99 is that much lower
    else:
        shortfall = 100 * (b - a) / b if b else 0.0  # the committed one reaches this less
    unit = "ms p99" if objective == "p99" else outcome.unit
    figures = (
        f"committed #{committed.index} {a:,.2f} {unit}, best #{best.index} "
        f"{best.candidate.label()} {b:,.2f} {unit}"
    )
    if shortfall > within_percent:
        return GateCheck(
            within_percent,
            False,
            shortfall,
            f"the committed configuration falls {shortfall:.1f}% short of the best "
            f"({objective}), more than the {within_percent:g}% allowed: {figures}",
        )
    return GateCheck(
        within_percent,
        True,
        shortfall,
        f"the committed configuration is within {max(shortfall, 0):.1f}% of the best "
        f"({objective}; {within_percent:g}% allowed): {figures}",
    )


# -- files ---------------------------------------------------------------------------------
COLUMNS: tuple[tuple[str, Callable[[Trial], Any]], ...] = (
    ("candidate", lambda t: t.index),
    ("committed", lambda t: int(t.committed)),
    ("status", lambda t: t.status),
    ("format", lambda t: t.candidate.format),
    ("max_batch_size", lambda t: t.candidate.max_batch_size),
    ("dynamic_batching", lambda t: int(t.candidate.dynamic_batching)),
    ("max_queue_delay_microseconds", lambda t: t.candidate.max_queue_delay_us),
    ("preferred_batch_size", lambda t: " ".join(map(str, t.candidate.preferred_batch_sizes))),
    ("instance_count", lambda t: t.candidate.instance_count),
    ("instance_kind", lambda t: t.candidate.instance_kind or ""),
    ("intra_op_threads", lambda t: t.candidate.threads),
    ("precision", lambda t: t.candidate.precision),
    ("Concurrency", lambda t: t.candidate.concurrency),
    ("Inferences/Second", lambda t: _round(t.throughput, 3)),
    ("p99 latency", lambda t: _round(t.p99_ms * 1e3, 0)),  # usec, as perf_analyzer's
    ("Avg latency", lambda t: _round(t.avg_ms * 1e3, 0)),
    ("within_slo", lambda t: _round(t.within_slo, 4)),
    ("goodput", lambda t: _round(t.goodput, 3)),
    ("accuracy_ratio", lambda t: _round(t.accuracy_ratio, 4)),
    ("accuracy", lambda t: t.accuracy),
    ("memory_mb", lambda t: "" if t.memory_mb is None else round(t.memory_mb)),
    ("measurements", lambda t: len(t.measurements) or 1),
    ("spread", lambda t: _round(t.spread, 4)),  # (max - min) / median of its throughputs
    ("stable", lambda t: int(t.stable)),
    ("feasible", lambda t: int(t.feasible)),
    ("seconds", lambda t: round(t.seconds, 1)),
    ("message", lambda t: "; ".join([*t.violations, first_line(t.message)]).strip("; ")),
)


def _round(value: float, digits: int) -> Any:
    return "" if math.isnan(value) else round(value, digits)


def write_csv(trials: Sequence[Trial], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([name for name, _ in COLUMNS])
        for t in trials:
            writer.writerow([get(t) for _, get in COLUMNS])


def markdown(outcome: Outcome) -> str:
    unit = outcome.unit
    best = outcome.best
    front = {t.index for t in pareto_front(outcome.trials)}
    goodput = outcome.objective == "goodput" or outcome.slo_ms is not None
    head = ["#", "configuration", f"throughput ({unit})", "p99 (ms)", "avg (ms)"]
    head += ["within SLO"] if goodput else []
    judged = outcome.accuracy is not None
    head += ["accuracy ratio"] if judged else []
    head += ["memory (MB)", "result"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in outcome.trials:
        marks = []
        if best is not None and t is best:
            marks.append("**best**")
        if t.committed:
            marks.append("committed")
        if t.index in front:
            marks.append("Pareto")
        if t.status != "measured":
            result = f"{t.status.upper()}: {_cell(first_line(t.message))}"
        elif t.violations:
            result = "breaks " + "; ".join(t.violations)
        else:
            result = "ok" + ("" if t.stable else " (not stable)")
        if not math.isnan(t.spread):
            result += f", spread {100 * t.spread:.0f}%"
        if t.measurements:
            result += f", median of {len(t.measurements)}"
        cells = [
            str(t.index),
            _cell(t.candidate.label()),
            "" if math.isnan(t.throughput) else f"{t.throughput:,.1f}",
            "" if math.isnan(t.p99_ms) else f"{t.p99_ms:.2f}",
            "" if math.isnan(t.avg_ms) else f"{t.avg_ms:.2f}",
        ]
        if goodput:
            cells.append("" if math.isnan(t.within_slo) else f"{100 * t.within_slo:.1f}%")
        if judged:
            cells.append("" if math.isnan(t.accuracy_ratio) else f"{t.accuracy_ratio:.4f}")
        cells += [
            "" if t.memory_mb is None else f"{t.memory_mb:,.0f}",
            ", ".join([*marks, result]),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")[:300]


def pareto_plot(outcome: Outcome, path: Path) -> bool:
    """Throughput against p99 of every measured candidate, the Pareto front joined, the best
    and the committed ones marked; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    measured = [t for t in outcome.trials if t.status == "measured"]
    front = pareto_front(outcome.trials)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    feasible = [t for t in measured if t.feasible]
    broken = [t for t in measured if not t.feasible]
    ax.scatter(
        [t.p99_ms for t in feasible],
        [t.throughput for t in feasible],
        c="tab:blue",
        label="candidates",
    )
    if broken:
        ax.scatter(
            [t.p99_ms for t in broken],
            [t.throughput for t in broken],
            c="tab:gray",
            marker="x",
            label="break a constraint",
        )
    if front:
        ax.plot(
            [t.p99_ms for t in front], [t.throughput for t in front], "--", c="tab:orange",
            label="Pareto front",
        )  # fmt: skip
    best, committed = outcome.best, outcome.committed
    if committed is not None and committed.status == "measured":
        ax.scatter(
            [committed.p99_ms], [committed.throughput], s=160, facecolors="none",
            edgecolors="tab:red", label=f"committed (#{committed.index})",
        )  # fmt: skip
    if best is not None:
        ax.scatter(
            [best.p99_ms], [best.throughput], s=220, marker="*", c="tab:green",
            label=f"best (#{best.index})",
        )  # fmt: skip
    for t in measured:
        ax.annotate(str(t.index), (t.p99_ms, t.throughput), fontsize=7, alpha=0.7)
    if outcome.constraints.max_p99_ms is not None:
        ax.axvline(outcome.constraints.max_p99_ms, c="tab:red", lw=0.8, ls=":")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel(f"throughput ({outcome.unit})")
    ax.set_title(f"{outcome.model}: {len(measured)} configurations measured")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def unified_diff(committed: str, best: str, committed_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            best.splitlines(keepends=True),
            fromfile=committed_name,
            tofile="best/config.pbtxt",
        )
    )


def write_all(outcome: Outcome, directory: Path, json_path: Path | None = None) -> list[Path]:
    """Every file into `directory` (and the JSON also to `json_path`, e.g. a gate report's
    load-tune-NAME.json); returns what was written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    write_csv(outcome.trials, directory / CSV_FILE)
    written.append(directory / CSV_FILE)
    table = markdown(outcome)
    (directory / MARKDOWN_FILE).write_text(
        table + "\n" + "".join(f"{line}\n\n" for line in outcome.summary())
    )
    written.append(directory / MARKDOWN_FILE)
    if pareto_plot(outcome, directory / PLOT_FILE):
        written.append(directory / PLOT_FILE)
    if outcome.best_config is not None:
        (directory / BEST_CONFIG).write_text(outcome.best_config)
        written.append(directory / BEST_CONFIG)
        diff = unified_diff(
            outcome.committed_config or "", outcome.best_config, outcome.committed_file
        )
        (directory / DIFF_FILE).write_text(diff)
        written.append(directory / DIFF_FILE)
    document = json.dumps(_finite(outcome.as_dict()), indent=2, default=str)
    (directory / JSON_FILE).write_text(document)
    written.append(directory / JSON_FILE)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(document)
        written.append(json_path)
    return written
