"""This run against a stored gate report: throughput down or p99 up beyond a limit, and parity
that uses too much of its tolerance, each named.

Load figures are compared as medians over a point's measurement windows (load_results stores
each point's figures as those medians): one noisy window cannot fail a release where several
were measured.
With a single window per run, that window's figure is compared, so limits should sit above
the run-to-run noise of the machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_triton.base.errors import TritonTestError
from pytest_triton.gate.document import SCHEMA
from pytest_triton.gate.load_results import figure, fmt


class BaselineError(TritonTestError, ValueError):
    """A baseline file that cannot be used, with how to make one."""


@dataclass(frozen=True)
class Limits:
    throughput_drop_pct: float = 10.0
    p99_rise_pct: float = 20.0
    headroom_pct: float = 80.0


def read_baseline(path: Path) -> dict[str, Any]:
    hint = (
        "write one with --triton-save-baseline FILE, or pass a report.json of an earlier "
        "--triton-report run"
    )
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise BaselineError(f"baseline {path} does not exist; {hint}") from None
    except (OSError, ValueError) as exc:
        raise BaselineError(f"baseline {path} is not readable JSON ({exc}); {hint}") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise BaselineError(
            f'baseline {path} is not a pytest-triton gate report (no "schema": "{SCHEMA}"); {hint}'
        )
    return document


def _points(document: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for run in document.get("load") or []:
        for point in run.get("points", []):
            yield str(point.get("key") or run.get("name")), point


def _parity(document: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        f"{r['variant']} {r['protocol']} {r.get('transport') or 'none'}": r
        for r in document.get("parity") or []
    }


def _figure(point: Mapping[str, Any], metric: str) -> float | None:
    """A report's point holds the median over its windows already (load_results): take it,
    so that a baseline edited by hand compares as edited; recompute only where it is missing."""
    value = point.get(metric)
    return float(value) if isinstance(value, int | float) else figure(point, metric)


def _change(now: float, then: float) -> float | None:
    return (now - then) / then * 100.0 if then else None


def compare_with_baseline(
    current: Mapping[str, Any], baseline: Mapping[str, Any], limits: Limits, source: str
) -> dict[str, Any]:
    """Every comparison made, the regressions named, and what the baseline had that this run
    did not measure."""
    rows: list[dict[str, Any]] = []
    regressions: list[str] = []
    now_points = dict(_points(current))
    missing = []
    for key, then in _points(baseline):
        now = now_points.get(key)
        if now is None:
            missing.append(f"load {key}")
            continue
        for metric, label, limit, worse in (
            ("throughput", "throughput", limits.throughput_drop_pct, -1),
            ("p99_ms", "p99 latency (ms)", limits.p99_rise_pct, +1),
        ):
            a, b = _figure(now, metric), _figure(then, metric)
            if a is None or b is None:
                continue
            change = _change(a, b)
            regressed = change is not None and worse * change > limit
            rows.append(
                {
                    "kind": "load",
                    "what": key,
                    "metric": label,
                    "baseline": b,
                    "now": a,
                    "change_pct": change,
                    "limit_pct": limit,
                    "regressed": regressed,
                    "windows": max(len(now.get("windows") or []), 1),
                }
            )
            if regressed:
                direction = "down" if worse < 0 else "up"
                regressions.append(
                    f"{key}: {label} {direction} {abs(change or 0):.1f}% ({fmt(b)} -> {fmt(a)};"
                    f" limit {limit:g}%)"
                )
    parity_then = _parity(baseline)
    for key, row in _parity(current).items():
        used = row.get("headroom_used")
        before = parity_then.get(key, {}).get("headroom_used")
        if used is None:
            continue  # a failed comparison already fails its test
        regressed = used * 100.0 > limits.headroom_pct
        rows.append(
            {
                "kind": "parity",
                "what": key,
                "metric": "headroom used (%)",
                "baseline": None if before is None else before * 100.0,
                "now": used * 100.0,
                "change_pct": None,
                "limit_pct": limits.headroom_pct,
                "regressed": regressed,
                "windows": None,
            }
        )
        if regressed:
            was = "" if before is None else f", baseline {before * 100:.1f}%"
            regressions.append(
                f"{key}: parity used {used * 100:.1f}% of its tolerance "
                f"allowance (limit {limits.headroom_pct:g}%{was})"
            )
    missing += [f"parity {key}" for key in parity_then if key not in _parity(current)]
    return {
        "file": source,
        "created": baseline.get("created"),
        "limits": vars(limits),
        "comparisons": rows,
        "regressions": regressions,
        "not_measured": missing,
    }
