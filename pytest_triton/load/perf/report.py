"""What a sweep prints and writes: the examples' table, the latency-bound summary, warnings,
CSV / markdown / PNG / JSON files, and the verdict against targets. No locust import here.

The CSV reads where perf_analyzer's `-f file.csv` is read: perf_analyzer 2.51's columns first,
with its names, order and units (times in whole microseconds, "Inferences/Second" counting
samples), then ours. The markdown table is the examples' (batch size, concurrency or request
rate | throughput | avg | p95 | p99 latency), latencies with the histogram's 3 significant
digits.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_triton.base.config import TritonConfig
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.failed_requests import tally_of
from pytest_triton.load.measure.latency_histogram import ms_text
from pytest_triton.load.measure.server_side import CPU_SATURATED_PERCENT
from pytest_triton.load.measure.stream_log import checked_text, ended_text
from pytest_triton.load.measure.windows import Window, windows_table
from pytest_triton.load.perf.points import Point, bound_summary, largest_within_bound


def write_reports(
    points: Sequence[Point],
    args: argparse.Namespace,
    unit: str,
    name: str,
    verdict: dict[str, Any] | None = None,
) -> None:
    table = points_markdown(points, unit)
    print(table)
    lines = []
    goodput = getattr(args, "goodput", None)
    slo_ms = getattr(args, "slo_ms", None)
    label = point_label(points)
    best_of = within_bound(points, args, goodput)
    for (fmt, _), best in best_of.items():
        summary = bound_summary(
            best,
            slo_ms if goodput is not None and slo_ms else args.latency_bound,
            args.percentile,
            unit,
            goodput,
        )
        lines.append(f"{fmt}: {summary}" if several_formats(points) else summary)
    lines += [f"WARNING: {label(p)}: {p.stability}" for p in points if not p.stable]
    lines += [f"{label(p)}: {p.schedule_warning}" for p in points if p.schedule_warning]
    saturated = [p for p in points if (p.generator_cpu_percent or 0) >= CPU_SATURATED_PERCENT]
    if saturated:
        lines.append(
            "WARNING: the load generator's CPU was saturated at "
            + ", ".join(label(p) for p in saturated)
            + ": it could not keep up, those throughputs are lower bounds."
        )
    for p in points:
        lines += [
            f"{p.format}: {line}" if several_formats(points) else line for line in kind_lines(p)
        ]
    failed = [p for p in points if p.failed_requests]
    if failed:
        lines += [
            f"WARNING: failed requests at {label(p)} ({p.failed_requests:,} of "
            f"{p.total_requests or p.requests:,}): "
            f"{p.reasons.summary() or 'reasons not recorded'}"
            for p in failed
        ]
        for p in failed:
            if p.reasons:
                lines.append(f"Failed requests at {label(p)}, by reason:\n{p.reasons.table()}")
    for line in lines:
        print(line)
    for p in points:
        print(f"\nWindows of {label(p)} ({p.stability or 'stable'}):")
        print(windows_table([Window.from_dict(w) for w in p.windows], unit))
        if p.server_replicas:
            print(f"\nLoad over the replicas at {label(p)} (summed above):")
            print(replicas_markdown(p.server_replicas))
    if args.csv:
        write_points_csv(points, args.csv)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table + "\n" + "".join(f"\n{line}\n" for line in lines))
    if args.plot:
        plot(
            points,
            args.plot,
            title=f"{name}: latency vs throughput",
            unit=unit,
            bound_ms=args.latency_bound,
            percentile=args.percentile,
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "model": name,
                    "unit": unit,
                    "points": [p.as_dict() for p in points],
                    "latency_bound_ms": args.latency_bound,
                    "percentile": args.percentile,
                    "goodput": goodput,
                    "slo_ms": slo_ms,
                    "within_bound": {
                        # keyed by batch size; with several formats "FORMAT BATCH"
                        (f"{fmt} {b}" if several_formats(points) else str(b)): (
                            best.as_dict() if best else None
                        )
                        for (fmt, b), best in best_of.items()
                    }
                    if args.latency_bound is not None
                    else None,
                    "verdict": verdict,
                },
                indent=2,
            )
        )


def several_formats(points: Sequence[Point]) -> bool:
    """Whether the points are of more than one export format (triton-perf --triton-formats)."""
    return len({p.format for p in points}) > 1


def format_order(points: Sequence[Point]) -> dict[str, int]:
    """Each format's place: the order they were measured in (as asked)."""
    return {fmt: i for i, fmt in enumerate(dict.fromkeys(p.format for p in points))}


def point_label(points: Sequence[Point]) -> Callable[[Point], str]:
    """How the reports name a point: 'batch 1 concurrency 4', led by its format when the
    points are of several ('onnx batch 1 concurrency 4')."""
    if several_formats(points):
        return lambda p: f"{p.format} batch {p.batch_size} {p.load}"
    return lambda p: f"batch {p.batch_size} {p.load}"


def within_bound(
    points: Sequence[Point], args: argparse.Namespace, goodput: float | None
) -> dict[tuple[str, int], Point | None]:
    """With --latency-bound: per format and batch size, the point offering the most load
    within it (None where none did); empty without a bound."""
    if args.latency_bound is None:
        return {}
    order = format_order(points)
    groups = sorted({(p.format, p.batch_size) for p in points}, key=lambda g: (order[g[0]], g[1]))
    return {
        (fmt, batch): largest_within_bound(
            [p for p in points if (p.format, p.batch_size) == (fmt, batch)],
            args.latency_bound,
            args.percentile,
            goodput,
        )
        for fmt, batch in groups
    }


HARD_TARGETS = frozenset({"wrong_answers", "answer_agreement", "perf_fail_ratio"})
"""Targets every point must meet: a failed request or a wrong answer is never a load level
(the others are model_analyzer's reading: some point meets every one)."""


def sweep_verdict(points: Sequence[Point], config: TritonConfig) -> dict[str, Any] | None:
    """Which points meet every target (--perf-* or TRITON_PERF_*): the run passes when one
    does and no point failed requests beyond --perf-fail-ratio (0 by default) or answered
    wrongly. None without targets and without a failed request (the gate report reads it
    from --json)."""
    checked = bool(config.load.check_every) or any(p.answers_checked for p in points)
    failing = any(p.failed_requests or p.wrong_answers for p in points)
    if not failing and all(config.origins.get(t.name) == "default" for t in tg.TARGET_DEFS):
        return None
    targets = tg.Targets.from_config(config)
    rows: list[dict[str, Any]] = []
    for p in points:
        failed = tg.failures(tg.evaluate(targets, p))
        rows.append(
            {
                "format": p.format,
                "batch_size": p.batch_size,
                "concurrency": p.concurrency,
                "request_rate_asked": p.request_rate_asked,
                "load": p.load,
                "passed": not failed,
                "failed": [f"{c.label} {tg.describe_failure(c)}" for c in failed],
                "failed_targets": [c.name for c in failed],
                "first_wrong_answer": p.first_wrong_answer,
                "failed_requests": p.failed_requests,
                "failure_reasons": p.failure_reasons,
            }
        )
    return {
        "targets": {
            k: v
            for k, v in targets.limits.items()
            if v is not None and (k != "wrong_answers" or checked)
        },
        # some point meets every target (model_analyzer's reading), and no point failed
        # requests beyond --perf-fail-ratio, answered wrongly beyond --triton-max-wrong-answers
        # nor below --min-agreement
        "passed": any(r["passed"] for r in rows)
        and not any(HARD_TARGETS & set(r["failed_targets"]) for r in rows),
        "points": rows,
    }


def exit_status(verdict: dict[str, Any] | None) -> int:
    """Print sweep_verdict's verdict; the exit code (1 when no point meets every target, or
    one failed requests or answered wrongly)."""
    if verdict is None:
        return 0
    rows = verdict["points"]
    targets = ", ".join(f"{k}={v}" for k, v in verdict["targets"].items())
    print(
        f"Targets (Targets({targets})): {sum(r['passed'] for r in rows)} of {len(rows)} "
        "points meet every one"
    )
    several = len({r.get("format", "") for r in rows}) > 1
    for r in rows:
        state = "PASS" if r["passed"] else "FAIL - " + "; ".join(r["failed"])
        where = f"{r['format']} " if several else ""
        print(f"  {where}batch {r['batch_size']} {r['load']}: {state}")
        reasons = tally_of(r.get("failure_reasons"))
        if not r["passed"] and reasons:
            print(f"    failed requests: {reasons.summary()}")
        if not r["passed"] and r.get("first_wrong_answer"):
            print(f"    first wrong answer: {r['first_wrong_answer']}")
    failed = sorted({name for r in rows for name in r.get("failed_targets", ())})
    hard = sorted(HARD_TARGETS & set(failed))
    print(
        "RESULT: PASS"
        if verdict["passed"]
        else "RESULT: FAIL - "
        + (
            "a point failed requests or answered wrongly (failed: " + ", ".join(hard) + ")"
            if hard
            else "no measured point meets every target (failed: " + ", ".join(failed) + ")"
        )
    )
    return 0 if verdict["passed"] else 1


# -- reports -----------------------------------------------------------------------------------
def _us(value: float) -> int | str:
    return "" if math.isnan(value) else round(value)


def network_and_server_us(p: Point) -> float:
    """perf_analyzer's "Network+Server Send/Recv": the client's average latency less the
    server's average queue and compute times, never below 0. Our users time a request whole
    (no separate send and receive times), so this holds the client's own overhead too."""
    accounted = (
        p.server_queue_us
        + p.server_compute_input_us
        + p.server_compute_infer_us
        + p.server_compute_output_us
    )
    return max(p.avg_ms * 1e3 - accounted, 0.0) if not math.isnan(p.avg_ms) else math.nan


Column = tuple[str, Callable[[Point], Any]]
PERF_ANALYZER_COLUMNS: tuple[Column, ...] = (
    # perf_analyzer 2.51's -f CSV (without --verbose-csv), in its order; times in whole usec.
    # The first column is "Concurrency" or, for an open loop, "Request Rate" (see csv_columns).
    ("Inferences/Second", lambda p: round(p.throughput, 3)),
    ("Client Send", lambda p: 0),  # a Locust user times its request whole: 0, as a cache hit
    ("Network+Server Send/Recv", lambda p: _us(network_and_server_us(p))),
    ("Server Queue", lambda p: round(p.server_queue_us)),  # Triton's statistics, as PA's
    ("Server Compute Input", lambda p: round(p.server_compute_input_us)),
    ("Server Compute Infer", lambda p: round(p.server_compute_infer_us)),
    ("Server Compute Output", lambda p: round(p.server_compute_output_us)),
    ("Client Recv", lambda p: 0),  # likewise in Network+Server Send/Recv
    ("p50 latency", lambda p: _us(p.p50_ms * 1e3)),
    ("p90 latency", lambda p: _us(p.p90_ms * 1e3)),
    ("p95 latency", lambda p: _us(p.p95_ms * 1e3)),
    ("p99 latency", lambda p: _us(p.p99_ms * 1e3)),
)
OUR_COLUMNS: tuple[Column, ...] = (
    ("Avg latency", lambda p: _us(p.avg_ms * 1e3)),  # perf_analyzer's --verbose-csv name
    ("Batch Size", lambda p: p.batch_size),
    ("Concurrency", lambda p: p.concurrency),  # only in an open loop's file (1 user)
    ("Requests/Second", lambda p: round(p.request_rate, 3)),
    ("Request Count", lambda p: p.requests),
    ("Failure Count", lambda p: p.failures),
    ("Server Overhead", lambda p: round(p.server_overhead_us)),
    ("Server Request Latency", lambda p: round(p.server_request_us)),
    ("Server Avg Batch Size", lambda p: round(p.server_avg_batch, 3)),
    (
        "Client Overhead",
        lambda p: "" if math.isnan(p.client_overhead_ms) else round(p.client_overhead_ms * 1e3),
    ),
    (
        "Generator CPU %",
        lambda p: "" if p.generator_cpu_percent is None else round(p.generator_cpu_percent, 1),
    ),
    ("Stable", lambda p: "yes" if p.stable else "no"),
)


def _opt(value: float | None, scale: float = 1.0, digits: int | None = None) -> Any:
    """An optional figure as a CSV cell: empty where not measured."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return round(value * scale, digits) if digits is not None else round(value * scale)


CHECK_COLUMNS: tuple[Column, ...] = (
    # answers of sequences and streams compared with the reference, over the point's whole load
    ("Answers Checked", lambda p: _opt(p.answers_checked)),
    ("Wrong Answers", lambda p: p.wrong_answers),
)
SEQUENCE_COLUMNS: tuple[Column, ...] = (
    ("Sequences", lambda p: _opt(p.sequences)),
    ("Sequences/Second", lambda p: _opt(p.sequences_per_s, digits=3)),
    ("Mean Sequence Length", lambda p: _opt(p.mean_sequence_length, digits=2)),
    ("Server Executions", lambda p: p.server_executions),  # the sequence batcher's batches
)
STREAM_COLUMNS: tuple[Column, ...] = (
    # times in whole usec, as perf_analyzer's; a stream's "p50 latency" ... is its end to end
    ("TTFT p50", lambda p: _opt(p.ttft_p50_ms, 1e3)),
    ("TTFT p90", lambda p: _opt(p.ttft_p90_ms, 1e3)),
    ("TTFT p99", lambda p: _opt(p.ttft_p99_ms, 1e3)),
    ("ITL p50", lambda p: _opt(p.itl_p50_ms, 1e3)),
    ("ITL p90", lambda p: _opt(p.itl_p90_ms, 1e3)),
    ("ITL p99", lambda p: _opt(p.itl_p99_ms, 1e3)),
    ("Output Tokens/Second", lambda p: _opt(p.output_tokens_per_s, digits=3)),
    ("Streams/Second", lambda p: _opt(p.streams_per_s, digits=3)),
    ("Streams", lambda p: _opt(p.streams)),
    ("Output Tokens", lambda p: _opt(p.output_tokens)),
    ("Stream Goodput", lambda p: _opt(p.stream_goodput, digits=4)),
)


def csv_columns(points: Sequence[Point]) -> list[Column]:
    """perf_analyzer's columns, then ours: a closed loop's file starts with "Concurrency", an
    open loop's with "Request Rate" (and keeps the concurrency among ours); a sequence or
    stream model's file ends with the columns of its kind."""
    if any(p.request_rate_asked for p in points):
        first: Column = ("Request Rate", lambda p: p.request_rate_asked or "")
        ours = list(OUR_COLUMNS)
    else:
        first = ("Concurrency", lambda p: p.concurrency)
        ours = [c for c in OUR_COLUMNS if c[0] != "Concurrency"]
    if several_formats(points):  # a sweep over formats: which one served each row
        ours.insert(1, ("Format", lambda p: p.format))
    kinds = {p.kind for p in points}
    if "sequence" in kinds:
        ours += SEQUENCE_COLUMNS
    if "stream" in kinds:
        ours += STREAM_COLUMNS
    if kinds - {"single"} or any(p.answers_checked is not None for p in points):
        ours += CHECK_COLUMNS
    return [first, *PERF_ANALYZER_COLUMNS, *ours]


def agreement_line(p: Point) -> list[str]:
    """A point's agreement rate with the fp32 reference (--min-agreement), with its N."""
    if not p.agreement_samples or p.answer_agreement is None:
        return []
    agreed = round(p.answer_agreement * p.agreement_samples)
    return [
        f"batch {p.batch_size} {p.load}: answers judged by top-1 agreement with the fp32 "
        f"reference: {agreed} of N={p.agreement_samples} samples agree, rate "
        f"{p.answer_agreement:.4f}"
    ]


def kind_lines(p: Point) -> list[str]:
    """What a sequence or stream point adds to the printed report (and any point's
    agreement rate)."""
    load = f"batch {p.batch_size} {p.load}" if p.kind == "single" else p.load
    checked = (
        f"{p.answers_checked} answers checked against the PyTorch reference, "
        f"{p.wrong_answers} wrong"
        if p.answers_checked
        else "answers not checked (--check-every N checks them against a given server)"
    )
    batches = ", ".join(
        f"{k} x {v}" for k, v in sorted(p.server_batches.items(), key=lambda kv: int(kv[0]))
    )
    if p.kind == "sequence":
        lines = [
            f"{load}: {p.sequences or 0} sequences ended in the measured windows "
            f"({p.sequences_per_s or 0:.2f}/s), mean length "
            f"{p.mean_sequence_length or 0:.1f} requests; {checked}",
            f"  server (sequence batcher): {p.server_executions} executions, avg batch "
            f"{p.server_avg_batch:.2f}, queue {p.server_queue_us:.0f} usec, compute infer "
            f"{p.server_compute_infer_us:.0f} usec; batch sizes (size x executions): "
            f"{batches or 'none'}",
        ]
    elif p.kind == "stream":

        def ms(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.3f}"

        checked = (
            f"whole point (warm-up included): "
            f"{checked_text(p.answers_checked, p.wrong_answers)} against the PyTorch reference"
            if p.answers_checked
            else "answers not checked (--check-every N checks them against a given server)"
        )
        lines = [
            f"{load}, measured windows: {ended_text(p.streams or 0, p.failed_streams or 0)} "
            f"({p.streams_per_s or 0:.2f} complete/s), {p.output_tokens or 0} output tokens "
            f"({p.output_tokens_per_s or 0:.1f} tokens/s)"
            + (f", goodput {p.stream_goodput:.3f}" if p.stream_goodput is not None else ""),
            f"  {checked}",
            f"  time to first token (ms): p50 {ms(p.ttft_p50_ms)}, p90 {ms(p.ttft_p90_ms)}, "
            f"p99 {ms(p.ttft_p99_ms)}",
            f"  inter-token latency (ms): p50 {ms(p.itl_p50_ms)}, p90 {ms(p.itl_p90_ms)}, "
            f"p99 {ms(p.itl_p99_ms)}",
            f"  end to end (ms):          p50 {ms(p.p50_ms)}, p90 {ms(p.p90_ms)}, "
            f"p99 {ms(p.p99_ms)}",
        ]
    elif p.answers_checked is not None:
        lines = [
            f"{load}: {p.answers_checked:,} answers checked against the PyTorch reference, "
            f"{p.wrong_answers:,} wrong (whole point, warm-up included)"
        ]
    else:
        return agreement_line(p)
    if p.first_wrong_answer:
        lines.append(f"  first wrong answer: {p.first_wrong_answer}")
    return lines + agreement_line(p)


def replicas_markdown(spread: dict[str, dict[str, int]]) -> str:
    """How one point's load spread over --triton-replicas, as the Locust report shows it."""
    total = sum(r["success_count"] for r in spread.values())
    lines = ["| replica | requests | share | executions |", "|---|---:|---:|---:|"]
    for url, r in spread.items():
        share = 100.0 * r["success_count"] / total if total else 0.0
        lines.append(f"| {url} | {r['success_count']} | {share:.0f}% | {r['execution_count']} |")
    return "\n".join(lines)


def write_points_csv(points: Sequence[Point], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = csv_columns(points)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([name for name, _ in columns])
        for p in points:
            writer.writerow([get(p) for _, get in columns])


def points_markdown(points: Sequence[Point], unit: str = "infer/s") -> str:
    """The examples' table; the first columns are whatever varies (batch size, concurrency or
    request rate); a point whose windows never agreed is marked."""
    batches = {p.batch_size for p in points}
    concurrencies = {p.concurrency for p in points}
    rates = {p.request_rate_asked for p in points if p.request_rate_asked}
    keys: list[tuple[str, Callable[[Point], str]]] = []
    if several_formats(points):
        keys.append(("Format", lambda p: p.format))
    if len(batches) > 1 or (len(concurrencies) == 1 and not rates):
        keys.append(("Batch Size", lambda p: str(p.batch_size)))
    if rates:
        keys.append(("Request Rate", lambda p: f"{p.request_rate_asked or 0:g}/s"))
    elif len(concurrencies) > 1:
        keys.append(("Concurrency", lambda p: str(p.concurrency)))
    extra: list[tuple[str, Callable[[Point], str]]] = []
    kinds = {p.kind for p in points}
    if "sequence" in kinds:
        extra += [
            ("Sequences/s", lambda p: f"{p.sequences_per_s or 0:.1f}"),
            ("Mean Length", lambda p: f"{p.mean_sequence_length or 0:.1f}"),
            ("Checked", lambda p: f"{p.answers_checked or 0} ({p.wrong_answers} wrong)"),
        ]
    if "stream" in kinds:
        extra += [
            ("TTFT p99", lambda p: _ms_cell(p.ttft_p99_ms)),
            ("ITL p99", lambda p: _ms_cell(p.itl_p99_ms)),
            ("Tokens/s", lambda p: f"{p.output_tokens_per_s or 0:.1f}"),
            ("Checked", lambda p: f"{p.answers_checked or 0} ({p.wrong_answers} wrong)"),
        ]
    header = (
        [f"**{k}**" for k, _ in keys]
        + [
            "**Throughput**",
            "**Avg Latency**",
            "**95% Latency**",
            "**99% Latency**",
        ]
        + [f"**{k}**" for k, _ in extra]
    )
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("-" * (len(h) + 2) for h in header) + "|",
    ]
    order = format_order(points)
    for p in sorted(
        points,
        key=lambda p: (order[p.format], p.batch_size, p.request_rate_asked or 0, p.concurrency),
    ):
        cells = (
            [get(p) for _, get in keys]
            + [
                f"{p.throughput:.1f} {unit}" + ("" if p.stable else " (not stable)"),
                f"{ms_text(p.avg_ms)} ms",
                f"{ms_text(p.p95_ms)} ms",
                f"{ms_text(p.p99_ms)} ms",
            ]
            + [get(p) for _, get in extra]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ms_cell(value: float | None) -> str:
    return "n/a" if value is None else f"{ms_text(value)} ms"


def plot(
    points: Sequence[Point],
    path: Path,
    *,
    title: str,
    unit: str = "infer/s",
    bound_ms: float | None = None,
    percentile: int = 99,
) -> None:
    """Latency (avg and the percentile) against throughput, one line per batch size, each
    point labelled with its concurrency (or batch size, when only that varies)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    batches = sorted({p.batch_size for p in points})
    formats = list(format_order(points))
    by_batch_only = len({p.concurrency for p in points}) == 1 and len(batches) > 1
    groups = [
        group
        for fmt in formats
        for group in (
            [sorted((p for p in points if p.format == fmt), key=lambda p: p.batch_size)]
            if by_batch_only
            else [
                sorted(
                    (p for p in points if (p.format, p.batch_size) == (fmt, b)),
                    key=lambda p: (p.request_rate_asked or 0, p.concurrency),
                )
                for b in batches
            ]
        )
        if group
    ]
    for group in groups:
        label = f"{group[0].format} " if len(formats) > 1 else ""
        label += "" if by_batch_only else f"batch {group[0].batch_size} "
        xs = [p.throughput for p in group]
        line = ax.plot(
            xs, [p.latency(percentile) for p in group], marker="o", label=f"{label}p{percentile}"
        )[0]
        ax.plot(
            xs,
            [p.avg_ms for p in group],
            marker=".",
            linestyle="--",
            color=line.get_color(),
            label=f"{label}avg",
        )
        for p in group:
            tag = (
                f"b{p.batch_size}"
                if by_batch_only
                else f"r{p.request_rate_asked:g}"
                if p.request_rate_asked
                else f"c{p.concurrency}"
            )
            ax.annotate(
                tag,
                (p.throughput, p.latency(percentile)),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=8,
            )
    if bound_ms is not None:
        ax.axhline(bound_ms, color="grey", linestyle=":", label=f"bound {bound_ms:g} ms")
    ax.set_xlabel(f"throughput ({unit})")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
