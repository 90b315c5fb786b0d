"""What a sweep prints and writes: the seeds' table, the latency-bound summary, warnings,
CSV / markdown / PNG / JSON files, and the verdict against targets. No locust import here."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from ..config import TritonConfig
from . import targets as tg
from .perf import (
    Point,
    bound_summary,
    largest_within_bound,
    markdown_table,
    plot,
    write_csv,
)
from .server_report import CPU_SATURATED_PERCENT


def write_reports(points: Sequence[Point], args: argparse.Namespace, unit: str, name: str) -> None:
    table = markdown_table(points, unit)
    print(table)
    lines = []
    if args.latency_bound is not None:
        for batch in sorted({p.batch_size for p in points}):
            best = largest_within_bound([p for p in points if p.batch_size == batch],
                                        args.latency_bound, args.percentile)
            lines.append(bound_summary(best, args.latency_bound, args.percentile, unit))
    saturated = [p for p in points
                 if (p.generator_cpu_percent or 0) >= CPU_SATURATED_PERCENT]
    if saturated:
        lines.append("WARNING: the load generator's CPU was saturated at "
                     + ", ".join(f"batch {p.batch_size} concurrency {p.concurrency}"
                                 for p in saturated)
                     + ": it could not keep up, those throughputs are lower bounds.")
    failed = [p for p in points if p.failures]
    if failed:
        lines.append("WARNING: failed requests at " + ", ".join(
            f"batch {p.batch_size} concurrency {p.concurrency} ({p.failures})" for p in failed))
    for line in lines:
        print(line)
    if args.csv:
        write_csv(points, args.csv)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table + "\n" + "".join(f"\n{line}\n" for line in lines))
    if args.plot:
        plot(points, args.plot, title=f"{name}: latency vs throughput", unit=unit,
             bound_ms=args.latency_bound, percentile=args.percentile)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "model": name, "unit": unit, "points": [p.as_dict() for p in points],
            "latency_bound_ms": args.latency_bound, "percentile": args.percentile,
            "within_bound": {str(b): (best.as_dict() if best else None) for b, best in (
                (b, largest_within_bound([p for p in points if p.batch_size == b],
                                         args.latency_bound, args.percentile))
                for b in sorted({p.batch_size for p in points}))}
            if args.latency_bound is not None else None,
        }, indent=2))


def judge(points: Sequence[Point], config: TritonConfig) -> int:
    """With targets set (--perf-* or TRITON_PERF_*), model_analyzer's reading: which points
    meet every one; the run fails when none does."""
    if all(config.origins.get(t.name) == "default" for t in tg.TARGET_DEFS):
        return 0
    targets = tg.Targets.from_config(config)
    verdicts = [(p, tg.failures(tg.evaluate(targets, p))) for p in points]
    passing = [p for p, failed in verdicts if not failed]
    print(f"Targets ({targets}): {len(passing)} of {len(points)} points meet every one")
    for p, failed in verdicts:
        state = "PASS" if not failed else "FAIL - " + "; ".join(
            f"{c.label} {tg.describe_failure(c)}" for c in failed)
        print(f"  batch {p.batch_size} concurrency {p.concurrency}: {state}")
    print("RESULT: PASS" if passing else "RESULT: FAIL - no measured point meets every target")
    return 0 if passing else 1
