"""Step 5 of a run's verdict (measure -> figures -> targets -> verdict -> report): what the
run prints and the JSON document it writes, from its figures and verdict. Pure: text and a
dict out; load/runner/verdict.py writes them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.failed_requests import FailureTally
from pytest_triton.load.measure.latency_histogram import ms_text
from pytest_triton.load.measure.run_figures import RunFigures, Warmup
from pytest_triton.load.measure.run_length import window_text
from pytest_triton.load.measure.run_verdict import RunVerdict, offsets_text
from pytest_triton.load.measure.soak import soak_plot_names
from pytest_triton.load.measure.stages import stages_table
from pytest_triton.load.measure.stream_log import checked_text, ended_text
from pytest_triton.load.measure.windows import Stability, windows_table


@dataclass(frozen=True)
class RunReport:
    text: str  # printed after Locust's own tables
    document: dict[str, Any]  # the JSON report's body
    soak_plots: Path | None  # where the writer draws the soak's plots (None: none to draw)


def run_report(figures: RunFigures, verdict: RunVerdict) -> RunReport:
    named = with_plot_names(figures)
    return RunReport(
        summary_text(named, verdict), result_document(named, verdict), soak_plots_prefix(named)
    )


def soak_plots_prefix(figures: RunFigures) -> Path | None:
    """Where the soak's plots go: beside the JSON report, named after it (None: no soak or
    no JSON report)."""
    report_json = figures.record.config.load.report_json
    if figures.soak is None or not report_json:
        return None
    path = Path(report_json)
    return path.with_name(path.stem)


def with_plot_names(figures: RunFigures) -> RunFigures:
    """The figures with the soak's plots named (the writer draws them under these names)."""
    prefix = soak_plots_prefix(figures)
    if prefix is None or figures.soak is None:
        return figures
    soak = dataclasses.replace(figures.soak, figures=soak_plot_names(prefix))
    return dataclasses.replace(figures, soak=soak)


def summary_text(figures: RunFigures, verdict: RunVerdict) -> str:
    record, m = figures.record, figures.measured
    load = record.config.load
    loop = "closed loop"
    if load.request_rate:
        loop = f"open loop at {load.request_rate:g} req/s ({load.request_distribution} arrivals)"
    parts = [
        f"Client ({loop}): {m.requests} requests ({m.failures} failed, "
        f"{m.wrong_answers} of them wrong answers) in {m.duration_s:.1f}s: "
        f"{m.request_rate:.1f} req/s, {m.throughput:.1f} samples/s",
    ]
    parts += failures_text(record.failure_reasons, record.answers_checked, m.wrong_answers)
    if figures.stability is not None:
        by_time = record.config.measurement.measurement_mode == "time_windows"
        length = window_text(record.config) if by_time else ""
        parts.append(windows_text(figures.stability, figures.warmup, length))
    if figures.stages is not None:
        parts.append(f"Stages ({load.shape}):\n{stages_table(figures.stages)}")
    if record.offsets:
        parts.append(f"Worker clocks, offset to the master's: {offsets_text(record.offsets)}")
    parts += [r.text() for r in record.reports]
    parts += [figures.soak.text()] if figures.soak is not None else []
    parts += [stream_text(figures)] if figures.streams is not None else []
    parts += [update_text(record.update)] if record.update is not None else []
    target = record.config.gate.answer_agreement
    parts += [agreement_text(m, target)] if target is not None else []
    parts += verdict.warnings
    parts.append(tg.verdict_table(verdict.checks, "Verdict (pytest-triton targets)"))
    return "\n\n".join(parts)


def failures_text(reasons: FailureTally, checked: int | None, wrong: int) -> list[str]:
    """The answers checked, and the failed requests by reason with the first of each."""
    parts = []
    if checked is not None:
        parts.append(
            f"Answers checked against the PyTorch reference: {checked:,}, {wrong:,} wrong"
            + (f"; the first: {reasons.first('wrong answer')}" if wrong else "")
        )
    if reasons:
        parts.append(f"Failed requests by reason (whole run):\n{reasons.table()}")
    return parts


def agreement_text(m: tg.Measured, target: float) -> str:
    """The agreement rate of a reduced-precision variant's compared answers, its N and target."""
    head = "Answers judged by top-1 agreement with the fp32 reference (--triton-min-agreement)"
    if not m.agreement_samples:
        return (
            f"{head}: no answer's values were compared, so the rate >= {target:g} cannot be "
            "judged: run longer or compare more answers (--triton-check-every N)"
        )
    agreed = round(m.answer_agreement * m.agreement_samples)
    return (
        f"{head}: {agreed} of N={m.agreement_samples} samples agree, rate "
        f"{m.answer_agreement:.4f}, target >= {target:g}: "
        + ("met" if m.answer_agreement >= target else "MISSED")
    )


def result_document(figures: RunFigures, verdict: RunVerdict) -> dict[str, Any]:
    """The JSON report's body (the writer adds the plots' paths and the exit code)."""
    record, m = figures.record, figures.measured
    stability, stages, soak = figures.stability, figures.stages, figures.soak
    return {
        "host": record.host,
        "passed": verdict.passed,
        "checks": [vars(c) for c in verdict.checks],
        "measured": {
            **vars(m),
            "throughput": m.throughput,
            "request_rate": m.request_rate,
            "fail_ratio": m.fail_ratio,
            "slo_ms": record.config.gate.perf_slo_ms,
        },
        "windows": [w.as_dict() for w in stability.windows] if stability else [],
        "stability": stability.as_dict() if stability else None,
        "warmup": dataclasses.asdict(figures.warmup) if figures.warmup else None,
        "wrong_answers": m.wrong_answers,
        "answers_checked": record.answers_checked,
        "first_wrong_answer": record.failure_reasons.first("wrong answer"),
        "failure_reasons": record.failure_reasons.as_list(),
        "update": record.update,
        "shape": record.config.load.shape if stages is not None else None,
        "stages": [r.as_dict() for r in stages] if stages is not None else None,
        "soak": soak.as_dict() if soak is not None else None,
        "streams": stream_document(figures),
        "figures": soak.figures if soak is not None else [],
        "server": [r.as_dict() for r in record.reports],
        "generator_cpu_percent": record.cpu_percent,
        "requests_outside_run": figures.requests_outside_run,
        "worker_clock_offsets": record.offsets,
        "warnings": verdict.warnings,
    }


def stream_document(figures: RunFigures) -> dict[str, Any] | None:
    """The streams' figures for the JSON report; goodput only where an SLO defined it; `run`:
    the whole run's counts (warm-up included, every worker's), checked streams among them."""
    if figures.streams is None:
        return None
    document: dict[str, Any] = dict(figures.streams.as_dict())
    gate = figures.record.config.gate
    if not (gate.perf_slo_ttft_ms or gate.perf_slo_itl_ms):
        document.update(goodput=None, good_streams=None)
    log = figures.record.stream_log
    if log is not None:
        total = log.total()
        document["run"] = {
            "streams": total.streams,
            "failed_streams": total.failed,
            "output_tokens": total.tokens,
            "checked_streams": total.checked,
            "mismatched_streams": total.mismatched,
        }
    return document


def stream_text(figures: RunFigures) -> str:
    """The streams' figures after the warm-up, and the whole run's checked streams."""
    assert figures.streams is not None
    text = figures.streams.text()
    log = figures.record.stream_log
    if log is not None:
        total = log.total()
        text += (
            f"\n  whole run (warm-up included): {ended_text(total.streams, total.failed)}; "
            f"{checked_text(total.checked, total.mismatched)}"
        )
    return text


def windows_text(stability: Stability, warmup: Warmup | None = None, length: str = "") -> str:
    """`length`: the windows' (run_length.window_text), where they are cut by time."""
    after = f"after a {warmup.text()}, " if warmup is not None else ""
    of = f" ({length})" if length else ""
    lines = [f"Measurement windows{of} ({after}{stability.summary()}; * = measured):"]
    if stability.windows:
        lines.append(windows_table(stability.windows, chosen=stability.chosen))
    m = stability.judged
    if m is not None:
        of_what = "" if stability.stable else f" (all {len(stability.windows)} windows)"
        lines.append(
            f"Measured{of_what}: {m.throughput:,.1f} samples/s, {m.request_rate:,.1f} req/s, "
            f"avg {ms_text(m.avg_ms)} ms, p50 {ms_text(m.p50_ms)} ms, p95 {ms_text(m.p95_ms)} ms, "
            f"p99 {ms_text(m.p99_ms)} ms"
        )
    return "\n".join(lines)


def update_text(update: Mapping[str, Any]) -> str:
    head = (
        f"Model update: {update['model']} version {update['old_version']} -> "
        f"{update['new_version']}"
    )
    if not update["done"]:
        return f"{head}: not done ({update['error'] or 'the run ended before it'})"
    return (
        f"{head}: both served after {update['both_served_after_s']:.2f}s, the old one retired "
        f"after {update['finished_after_s']:.2f}s; {update['requests_during_switch']} requests "
        f"answered during the switch (p99 {ms_text(update['p99_during_switch_ms'])} ms, "
        f"{update['failures_during_switch']} failed), {update['requests_after_switch']} after"
    )
