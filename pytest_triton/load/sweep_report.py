"""What a sweep prints and writes: the seeds' table, the latency-bound summary, warnings,
CSV / markdown / PNG / JSON files, and the verdict against targets. No locust import here."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

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


def write_reports(points: Sequence[Point], args: argparse.Namespace, unit: str, name: str,
                  verdict: dict[str, Any] | None = None) -> None:
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
            "verdict": verdict,
        }, indent=2))


def sweep_verdict(points: Sequence[Point], config: TritonConfig) -> dict[str, Any] | None:
    """With targets set (--perf-* or TRITON_PERF_*), model_analyzer's reading: which points
    meet every one; the run passes when one does. None without targets."""
    if all(config.origins.get(t.name) == "default" for t in tg.TARGET_DEFS):
        return None
    targets = tg.Targets.from_config(config)
    rows = []
    for p in points:
        checks = tg.evaluate(targets, p)
        rows.append({"batch_size": p.batch_size, "concurrency": p.concurrency,
                     "passed": not tg.failures(checks), "checks": [vars(c) for c in checks],
                     "failed": [f"{c.label} {tg.describe_failure(c)}"
                                for c in tg.failures(checks)]})
    return {"targets": {k: v for k, v in targets.limits.items() if v is not None},
            "passed": any(r["passed"] for r in rows), "points": rows}


def judge(verdict: dict[str, Any] | None) -> int:
    """Print the verdict of sweep_verdict; the exit code (1 when no point meets every target)."""
    if verdict is None:
        return 0
    rows = verdict["points"]
    targets = ", ".join(f"{k}={v}" for k, v in verdict["targets"].items())
    print(f"Targets (Targets({targets})): {sum(r['passed'] for r in rows)} of {len(rows)} "
          "points meet every one")
    for r in rows:
        state = "PASS" if r["passed"] else "FAIL - " + "; ".join(r["failed"])
        print(f"  batch {r['batch_size']} concurrency {r['concurrency']}: {state}")
    print("RESULT: PASS" if verdict["passed"]
          else "RESULT: FAIL - no measured point meets every target")
    return 0 if verdict["passed"] else 1
