"""The gate report as one JSON document: the session's tests, the servers, one parity row per
variant x protocol x transport, batching evidence, load runs, what was skipped, and the
verdict with every reason it failed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

SCHEMA = "pytest-triton-gate/1"


@dataclass
class Outcome:
    """One test's result over its phases (a failed setup or teardown fails the test)."""

    nodeid: str
    outcome: str = "passed"  # passed | failed | skipped | xfailed | xpassed
    reason: str = ""
    duration_s: float = 0.0


@dataclass
class Collected:
    """What a session recorded, in the order it happened."""

    parity: list[dict[str, Any]] = field(default_factory=list)  # ParityResult.as_dict + test
    accuracy: list[dict[str, Any]] = field(default_factory=list)  # AccuracyResult.as_dict + test
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)  # by HTTP endpoint
    tests: dict[str, Outcome] = field(default_factory=dict)


def _worst(values: Iterable[float | None]) -> float | None:
    """The largest value, where None (could not compare) is worse than any number."""
    worst: float | None = 0.0
    for value in values:
        worst = None if value is None or worst is None else max(worst, value)
    return worst


def _key(record: Mapping[str, Any]) -> tuple[str, str, str]:
    return (record["variant"], record["protocol"], record.get("transport") or "none")


def parity_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per variant x protocol x transport: the worst figures over its checks, with the
    tolerance of the output that came closest to its allowance."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault(_key(record), []).append(record)
    rows = []
    for (variant, protocol, transport), group in groups.items():
        outputs = [o for r in group for o in r["outputs"]]
        worst = max(
            outputs,
            key=lambda o: math.inf if o["headroom_used"] is None else o["headroom_used"],
            default=None,
        )
        rows.append(
            {
                "variant": variant,
                "protocol": protocol,
                "transport": transport,
                "model": group[0]["model"],
                "format": group[0]["format"],
                "precision": group[0].get("precision"),
                "backend": group[0].get("backend"),
                "checks": len(group),
                "ok": all(r["ok"] for r in group),
                "max_abs": _worst(o["max_abs"] for o in outputs),
                "max_rel": _worst(o["max_rel"] for o in outputs),
                "headroom_used": _worst(o["headroom_used"] for o in outputs),
                "worst_output": worst["name"] if worst else None,
                "dtype": worst["dtype"] if worst else None,
                "rtol": worst["rtol"] if worst else None,
                "atol": worst["atol"] if worst else None,
                "tolerance_reason": worst.get("tolerance_reason") if worst else None,
                "tests": sorted({r["test"] for r in group if r.get("test")}),
            }
        )
    return sorted(rows, key=lambda r: (r["variant"], r["protocol"], r["transport"]))


def batching_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per variant x protocol x transport: requests sent together vs the executions Triton ran
    for them (dynamic batching shows as fewer executions than requests)."""
    sums: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in records:
        b = record.get("batching")
        if not b:
            continue
        row = sums.setdefault(
            _key(record),
            {
                "variant": record["variant"],
                "protocol": record["protocol"],
                "transport": record.get("transport") or "none",
                "requests": 0,
                "executions": 0,
                "inferences": 0,
                "batch_histogram": {},
            },
        )
        for name in ("requests", "executions", "inferences"):
            row[name] += int(b[name])
        for size, count in b.get("batch_histogram", {}).items():
            row["batch_histogram"][size] = row["batch_histogram"].get(size, 0) + count
    rows = []
    for row in sums.values():
        row["avg_batch_size"] = row["inferences"] / row["executions"] if row["executions"] else 0
        row["batched"] = row["executions"] < row["requests"]
        rows.append(row)
    return sorted(rows, key=lambda r: (r["variant"], r["protocol"], r["transport"]))


def pipeline_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per pipeline and mode (ensemble, bls, bls-async): its parity verdict over
    every protocol and transport, the first diverging step of a failed check, and each
    composing model's batching summed over the batching proofs."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        pipeline = record.get("pipeline")
        if not pipeline:
            continue
        row = rows.setdefault(
            (pipeline["pipeline"], pipeline["mode"]),
            {
                "pipeline": pipeline["pipeline"],
                "mode": pipeline["mode"],
                "front_model": pipeline["front_model"],
                "paths": [],
                "parity_checks": 0,
                "parity_ok": None,
                "first_diverging_step": None,
                "divergence": "",
                "batching_checks": 0,
                "steps": {},
                "tests": [],
            },
        )
        path = f"{record['protocol']}/{record.get('transport') or 'none'}"
        if path not in row["paths"]:
            row["paths"].append(path)
        if record.get("test") and record["test"] not in row["tests"]:
            row["tests"].append(record["test"])
        if record["check"] == "pipeline_parity":
            row["parity_checks"] += 1
            row["parity_ok"] = (row["parity_ok"] is not False) and bool(record["ok"])
            if not record["ok"] and not row["divergence"]:
                row["first_diverging_step"] = pipeline.get("first_diverging_step")
                row["divergence"] = pipeline.get("divergence", "")
        proofs = pipeline.get("batching", []) if record["check"] == "pipeline_batching" else []
        row["batching_checks"] += bool(proofs)
        for proof in proofs:
            step = row["steps"].setdefault(
                proof["step"],
                {
                    "step": proof["step"],
                    "model": proof["model"],
                    "requests": 0,
                    "executions": 0,
                    "inferences": 0,
                    "batch_histogram": {},
                    "batched": True,
                },
            )
            for name in ("requests", "executions", "inferences"):
                step[name] += int(proof[name])
            for size, count in proof.get("batch_histogram", {}).items():
                step["batch_histogram"][size] = step["batch_histogram"].get(size, 0) + count
            step["batched"] = step["batched"] and bool(proof["batched"])
    out = []
    for row in rows.values():
        steps = list(row["steps"].values())
        for step in steps:
            step["avg_batch_size"] = (
                step["inferences"] / step["executions"] if step["executions"] else 0.0
            )
        row["steps"] = steps
        row["batched"] = all(s["batched"] for s in steps) if steps else None
        out.append(row)
    return sorted(out, key=lambda r: (r["pipeline"], r["mode"]))


def outcome_counts(tests: Iterable[Outcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in tests:
        counts[t.outcome] = counts.get(t.outcome, 0) + 1
    return counts


def skipped(tests: Iterable[Outcome]) -> list[dict[str, Any]]:
    """Skipped tests grouped by reason, so forty skips of one cause read as one line."""
    by_reason: dict[str, list[str]] = {}
    for t in tests:
        if t.outcome == "skipped":
            by_reason.setdefault(t.reason or "no reason given", []).append(t.nodeid)
    return [
        {"reason": reason, "count": len(ids), "tests": ids}
        for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))
    ]


def build_document(
    collected: Collected,
    *,
    environment: Mapping[str, Any],
    load_runs: Sequence[Mapping[str, Any]],
    problems: Sequence[str],
    exit_status: int,
    duration_s: float,
    junit: str | None,
) -> dict[str, Any]:
    """The document before its verdict (see `decide`)."""
    tests = list(collected.tests.values())
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "session": {
            "exit_status": exit_status,
            "duration_s": round(duration_s, 1),
            "tests": outcome_counts(tests),
            "junit": junit,
        },
        "environment": dict(environment),
        "servers": list(collected.servers.values()),
        "parity": parity_rows(collected.parity),
        "batching": batching_rows(collected.parity),
        "pipelines": pipeline_rows(collected.parity),
        "parity_checks": list(collected.parity),
        "accuracy": list(collected.accuracy),
        "load": list(load_runs),
        "skipped": skipped(tests),
        "failed": [{"test": t.nodeid, "message": t.reason} for t in tests if t.outcome == "failed"],
        "problems": list(problems),
        "baseline": None,
    }


def decide(document: dict[str, Any]) -> dict[str, Any]:
    """Set the verdict: it fails for failed tests, a failed load run, an unreadable load file,
    a baseline regression, or a session that ended badly or ran nothing."""
    reasons: list[str] = []
    failed = document["failed"]
    if failed:
        names = ", ".join(f["test"] for f in failed[:5]) + (", ..." if len(failed) > 5 else "")
        reasons.append(f"{len(failed)} test(s) failed: {names}")
    status = document["session"]["exit_status"]
    if status not in (0, 1):
        reasons.append(
            f"pytest ended with exit status {status}" + (" (no tests ran)" if status == 5 else "")
        )
    for run in document["load"]:
        if run["passed"] is False:
            why = "; ".join(run["failed"]) or "see its report"
            reasons.append(f"load run {run['name']} failed its targets: {why}")
    reasons += [f"load result unreadable: {p}" for p in document["problems"]]
    baseline = document.get("baseline")
    if baseline and baseline["regressions"]:
        reasons.append(
            f"{len(baseline['regressions'])} regression(s) against the baseline "
            f"{baseline['file']}: " + "; ".join(baseline["regressions"])
        )
    document["verdict"] = {"passed": not reasons, "reasons": reasons}
    return document


def json_safe(value: Any) -> Any:
    """NaN and infinities (unmeasured figures) as None: report.json stays strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
