"""What a sweep prints and writes: the examples' table, the latency-bound summary, warnings,
CSV / markdown / PNG / JSON files, and the verdict against targets. No locust import here.

CSV columns follow perf_analyzer's where they overlap (times in microseconds, "Inferences/
Second" counting samples); the markdown table is the examples' (batch size, concurrency or
request rate | throughput | avg | p95 | p99 latency).
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
from pytest_triton.load.measure.server_side import CPU_SATURATED_PERCENT
from pytest_triton.load.measure.windows import Window, windows_table
from pytest_triton.load.sweep.points import Point, bound_summary, largest_within_bound


def _window(data: dict[str, Any]) -> Window:
    return Window(**{k: v for k, v in data.items() if k in Window.__dataclass_fields__})


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
    if args.latency_bound is not None:
        for batch in sorted({p.batch_size for p in points}):
            best = largest_within_bound(
                [p for p in points if p.batch_size == batch],
                args.latency_bound,
                args.percentile,
                goodput,
            )
            lines.append(
                bound_summary(
                    best,
                    slo_ms if goodput is not None and slo_ms else args.latency_bound,
                    args.percentile,
                    unit,
                    goodput,
                )
            )
    lines += [
        f"WARNING: batch {p.batch_size} {p.load}: {p.stability}" for p in points if not p.stable
    ]
    lines += [
        f"batch {p.batch_size} {p.load}: {p.schedule_warning}" for p in points if p.schedule_warning
    ]
    saturated = [p for p in points if (p.generator_cpu_percent or 0) >= CPU_SATURATED_PERCENT]
    if saturated:
        lines.append(
            "WARNING: the load generator's CPU was saturated at "
            + ", ".join(f"batch {p.batch_size} {p.load}" for p in saturated)
            + ": it could not keep up, those throughputs are lower bounds."
        )
    failed = [p for p in points if p.failures]
    if failed:
        lines.append(
            "WARNING: failed requests at "
            + ", ".join(f"batch {p.batch_size} {p.load} ({p.failures})" for p in failed)
        )
    for line in lines:
        print(line)
    for p in points:
        print(f"\nWindows of batch {p.batch_size} {p.load} ({p.stability or 'stable'}):")
        print(windows_table([_window(w) for w in p.windows], unit))
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
                        str(b): (best.as_dict() if best else None)
                        for b, best in (
                            (
                                b,
                                largest_within_bound(
                                    [p for p in points if p.batch_size == b],
                                    args.latency_bound,
                                    args.percentile,
                                    goodput,
                                ),
                            )
                            for b in sorted({p.batch_size for p in points})
                        )
                    }
                    if args.latency_bound is not None
                    else None,
                    "verdict": verdict,
                },
                indent=2,
            )
        )


def sweep_verdict(points: Sequence[Point], config: TritonConfig) -> dict[str, Any] | None:
    """With targets set (--perf-* or TRITON_PERF_*), model_analyzer's reading: which points
    meet every one; the run passes when one does. None without targets (the gate report
    reads it from --json)."""
    if all(config.origins.get(t.name) == "default" for t in tg.TARGET_DEFS):
        return None
    targets = tg.Targets.from_config(config)
    rows = []
    for p in points:
        failed = tg.failures(tg.evaluate(targets, p))
        rows.append(
            {
                "batch_size": p.batch_size,
                "concurrency": p.concurrency,
                "request_rate_asked": p.request_rate_asked,
                "load": p.load,
                "passed": not failed,
                "failed": [f"{c.label} {tg.describe_failure(c)}" for c in failed],
            }
        )
    return {
        "targets": {k: v for k, v in targets.limits.items() if v is not None},
        "passed": any(r["passed"] for r in rows),
        "points": rows,
    }


def exit_status(verdict: dict[str, Any] | None) -> int:
    """Print sweep_verdict's verdict; the exit code (1 when no point meets every target)."""
    if verdict is None:
        return 0
    rows = verdict["points"]
    targets = ", ".join(f"{k}={v}" for k, v in verdict["targets"].items())
    print(
        f"Targets (Targets({targets})): {sum(r['passed'] for r in rows)} of {len(rows)} "
        "points meet every one"
    )
    for r in rows:
        state = "PASS" if r["passed"] else "FAIL - " + "; ".join(r["failed"])
        print(f"  batch {r['batch_size']} {r['load']}: {state}")
    print(
        "RESULT: PASS"
        if verdict["passed"]
        else "RESULT: FAIL - no measured point meets every target"
    )
    return 0 if verdict["passed"] else 1


# -- reports -----------------------------------------------------------------------------------
CSV_COLUMNS: tuple[tuple[str, Callable[[Point], Any]], ...] = (
    # perf_analyzer's column names (times in usec) ...
    ("Concurrency", lambda p: p.concurrency),
    ("Inferences/Second", lambda p: round(p.throughput, 3)),
    ("Server Queue", lambda p: round(p.server_queue_us)),
    ("Server Compute Input", lambda p: round(p.server_compute_input_us)),
    ("Server Compute Infer", lambda p: round(p.server_compute_infer_us)),
    ("Server Compute Output", lambda p: round(p.server_compute_output_us)),
    ("p50 latency", lambda p: round(p.p50_ms * 1e3)),
    ("p90 latency", lambda p: round(p.p90_ms * 1e3)),
    ("p95 latency", lambda p: round(p.p95_ms * 1e3)),
    ("p99 latency", lambda p: round(p.p99_ms * 1e3)),
    ("Avg latency", lambda p: round(p.avg_ms * 1e3)),
    # ... and ours
    ("Batch Size", lambda p: p.batch_size),
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
    ("Request Rate", lambda p: "" if p.request_rate_asked is None else p.request_rate_asked),
    ("Stable", lambda p: "yes" if p.stable else "no"),
)


def write_points_csv(points: Sequence[Point], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([name for name, _ in CSV_COLUMNS])
        for p in points:
            writer.writerow([get(p) for _, get in CSV_COLUMNS])


def points_markdown(points: Sequence[Point], unit: str = "infer/s") -> str:
    """The examples' table; the first columns are whatever varies (batch size, concurrency or
    request rate); a point whose windows never agreed is marked."""
    batches = {p.batch_size for p in points}
    concurrencies = {p.concurrency for p in points}
    rates = {p.request_rate_asked for p in points if p.request_rate_asked}
    keys: list[tuple[str, Callable[[Point], str]]] = []
    if len(batches) > 1 or (len(concurrencies) == 1 and not rates):
        keys.append(("Batch Size", lambda p: str(p.batch_size)))
    if rates:
        keys.append(("Request Rate", lambda p: f"{p.request_rate_asked or 0:g}/s"))
    elif len(concurrencies) > 1:
        keys.append(("Concurrency", lambda p: str(p.concurrency)))
    header = [f"**{k}**" for k, _ in keys] + [
        "**Throughput**",
        "**Avg Latency**",
        "**95% Latency**",
        "**99% Latency**",
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("-" * (len(h) + 2) for h in header) + "|",
    ]
    for p in sorted(points, key=lambda p: (p.batch_size, p.request_rate_asked or 0, p.concurrency)):
        cells = [get(p) for _, get in keys] + [
            f"{p.throughput:.1f} {unit}" + ("" if p.stable else " (not stable)"),
            f"{p.avg_ms:.2f} ms",
            f"{p.p95_ms:.2f} ms",
            f"{p.p99_ms:.2f} ms",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    by_batch_only = len({p.concurrency for p in points}) == 1 and len(batches) > 1
    groups = (
        [sorted(points, key=lambda p: p.batch_size)]
        if by_batch_only
        else [
            sorted(
                (p for p in points if p.batch_size == b),
                key=lambda p: (p.request_rate_asked or 0, p.concurrency),
            )
            for b in batches
        ]
    )
    for group in groups:
        label = "" if by_batch_only else f"batch {group[0].batch_size} "
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
