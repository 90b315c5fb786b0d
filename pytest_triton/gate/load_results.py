"""Load results a gate report takes in: files named `load-*.json` in the report directory,
written by a locustfile (`--triton-report-json DIR/load-NAME.json`), by triton-perf
(`--json DIR/load-NAME.json`) or by triton-tune (`--json DIR/load-tune-NAME.json`).

Each becomes a run with one point (Locust), one point per batch size x concurrency
(triton-perf), or the committed and the best configuration (triton-tune, which fails the run
when its --gate-within check failed). A point's figures are medians over its measurement
windows when the file has a `windows` list (top level or under `measured`), else the run's
single figures: a comparison never rests on one window when there are several. Each window's
latencies come from the HdrHistogram of its requests (microsecond resolution, 3 significant
digits); the histogram's own text (`latency_histogram`) is left out of the report, which needs
only the figures.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LOAD_GLOB = "load-*.json"
METRICS = ("throughput", "avg_ms", "p50_ms", "p95_ms", "p99_ms")
HISTOGRAM_KEY = "latency_histogram"  # a window's base64 HdrHistogram in load files


def figure(point: Mapping[str, Any], metric: str) -> float | None:
    """The median of a metric over the point's windows, or its single value; None if absent."""
    values = [_number(w.get(metric)) for w in point.get("windows") or ()]
    present = [v for v in values if v is not None]
    if present:
        return float(statistics.median(present))
    return _number(point.get(metric))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def read_load_files(directory: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every load-*.json of the directory as a run; unreadable ones as problems."""
    runs: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in sorted(directory.glob(LOAD_GLOB)):
        try:
            document = json.loads(path.read_text())
            run = load_run(path.stem.removeprefix("load-"), path.name, document)
            run["written"] = path.stat().st_mtime
            runs.append(run)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(
                f"{path.name}: cannot be read as a load result ({exc}); write it "
                "with a locustfile's --triton-report-json or triton-perf --json"
            )
    return runs, problems


def load_run(name: str, source: str, document: Mapping[str, Any]) -> dict[str, Any]:
    if "tune" in document:
        return _tune_run(name, source, document)
    if "points" in document:
        return _perf_run(name, source, document)
    if "measured" in document:
        return _locust_run(name, source, document)
    raise ValueError(
        "neither a Locust report (it has no 'measured'), a triton-perf sweep (no 'points') "
        "nor a triton-tune search (no 'tune')"
    )


def _point(values: Mapping[str, Any], windows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    point: dict[str, Any] = {
        "windows": [{k: v for k, v in w.items() if k != HISTOGRAM_KEY} for w in windows]
    }
    point.update({m: _number(values.get(m)) for m in METRICS})
    point.update({m: figure(point, m) for m in METRICS})
    point["requests"] = int(values.get("requests") or 0)
    point["failures"] = int(values.get("failures") or 0)
    # every failed request by reason ({kind, text, count, example}), most frequent first
    point["failure_reasons"] = list(values.get("failure_reasons") or [])
    point["answers_checked"] = values.get("answers_checked")
    point["wrong_answers"] = values.get("wrong_answers")
    point["duration_s"] = _number(values.get("duration_s"))
    return point


def _failed(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    named = []
    for c in checks:
        if c.get("passed") is False:
            sign = "<=" if c.get("kind") == "max" else ">="
            unit = f" ({c['unit']})" if c.get("unit") else ""
            named.append(
                f"{c.get('name')}{unit} measured {fmt(c.get('measured'))}, target "
                f"{sign} {fmt(c.get('limit'))}"
            )
    return named


def fmt(value: Any) -> str:
    """A figure as people read it: 75,000 and 82, or 0.0123."""
    number = _number(value)
    if number is None:
        return "n/a"
    return f"{number:,.0f}" if abs(number) >= 100 else f"{number:.3g}"


def _locust_run(name: str, source: str, document: Mapping[str, Any]) -> dict[str, Any]:
    measured = document["measured"]
    windows = document.get("windows") or measured.get("windows") or []
    checks = list(document.get("checks", []))
    point = {
        "key": name,
        **_point(
            {
                **measured,
                "failure_reasons": document.get("failure_reasons"),
                "answers_checked": document.get("answers_checked"),
            },
            windows,
        ),
    }
    server = list(document.get("server", []))
    return {
        "name": name,
        "source": source,
        "kind": "locust",
        "host": document.get("host"),
        "model": ", ".join(str(s.get("model")) for s in server) or None,
        "passed": document.get("passed"),
        "exit_code": document.get("exit_code"),
        "checks": checks,
        "failed": _failed(checks),
        "points": [point],
        "server": server,
        "warnings": list(document.get("warnings", [])),
        "stability": (document.get("stability") or {}).get("summary"),
        "stages": list(document.get("stages") or []),
        "soak": _soak_summary(document.get("soak")),
        "streams": document.get("streams"),
        "figures": [str(f) for f in document.get("figures") or []],
        "wrong_answers": document.get("wrong_answers"),
        "goodput": measured.get("goodput"),
        "slo_ms": measured.get("slo_ms"),
        "update": document.get("update"),
    }


def _soak_summary(soak: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A soak's figures without its samples (the plots show them)."""
    if not soak:
        return None
    return {k: v for k, v in soak.items() if k != "samples"}


def _perf_run(name: str, source: str, document: Mapping[str, Any]) -> dict[str, Any]:
    verdict = document.get("verdict") or None
    by_point = {
        (v.get("format", ""), v["batch_size"], v["concurrency"], v.get("request_rate_asked")): v
        for v in (verdict or {}).get("points", [])
    }
    # a sweep over export formats (--triton-formats): each point's key names its format
    several = len({raw.get("format", "") for raw in document["points"]}) > 1
    points = []
    for raw in document["points"]:
        batch, concurrency = int(raw["batch_size"]), int(raw["concurrency"])
        rate = raw.get("request_rate_asked")  # open loop: the rate, not the concurrency, varies
        load = f"rate {rate:g}/s" if rate else f"concurrency {concurrency}"
        fmt = raw.get("format", "")
        point = {
            "key": f"{name} {fmt + ' ' if several else ''}batch {batch} {load}",
            **_point(raw, raw.get("windows") or []),
            "batch_size": batch,
            "concurrency": concurrency,
            "request_rate_asked": rate,
            "avg_batch_size": _number(raw.get("server_avg_batch")),
            "goodput": _number(raw.get("goodput")),  # the share within the SLO, when set
        }
        judged = by_point.get((fmt, batch, concurrency, rate))
        point["passed"] = None if judged is None else bool(judged["passed"])
        points.append(point)
    failed = (
        []
        if verdict is None or verdict.get("passed")
        else [
            "a point failed requests or answered wrongly, or no measured point meets every "
            "target (" + ", ".join(f"{k} {v}" for k, v in verdict.get("targets", {}).items()) + ")"
        ]
    )
    return {
        "name": name,
        "source": source,
        "kind": "triton-perf",
        "host": None,
        "model": document.get("model"),
        "unit": document.get("unit"),
        "passed": None if verdict is None else bool(verdict.get("passed")),
        "checks": [],
        "failed": failed,
        "points": points,
        "server": [],
        "warnings": [
            f"{p['key']}: {raw['stability']}"
            for p, raw in zip(points, document["points"], strict=True)
            if raw.get("stability")
        ],
        "targets": (verdict or {}).get("targets", {}),
        "stability": None,
        "stages": [],
        "soak": None,
        "figures": [],
        "goodput_target": _number(document.get("goodput")),
        "slo_ms": _number(document.get("slo_ms")),
        "latency_bound_ms": _number(document.get("latency_bound_ms")),
        "percentile": document.get("percentile"),
        "within_bound": _within_bound(name, document.get("within_bound")),
    }


def _within_bound(name: str, found: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """triton-perf's answer to --latency-bound, per batch size (keyed "FORMAT BATCH" in a
    sweep over formats): the highest load that held the bound (or the goodput within the
    SLO), None where no measured load did."""
    if not found:
        return None
    held: list[dict[str, Any]] = []
    for key, best in found.items():  # in the order triton-perf wrote them
        fmt, _, batch = key.rpartition(" ")
        where = f"{fmt} batch {batch}" if fmt else f"batch {batch}"
        if not best:
            held.append({"batch_size": int(batch), "where": where, "load": None})
            continue
        rate = best.get("request_rate_asked")
        load = f"rate {rate:g}/s" if rate else f"concurrency {best.get('concurrency')}"
        held.append(
            {
                "batch_size": int(batch),
                "where": where,
                "load": load,
                "key": f"{name} {where} {load}",
                "throughput": _number(best.get("throughput")),
                "p99_ms": _number(best.get("p99_ms")),
                "goodput": _number(best.get("goodput")),
            }
        )
    return held


def _tune_run(name: str, source: str, document: Mapping[str, Any]) -> dict[str, Any]:
    """triton-tune's search: the committed configuration and the best one as points (their
    keys stay the same from run to run, so baselines compare them); the run fails when the
    --gate-within check failed, and has no verdict without one."""
    tune = document["tune"]
    gate = document.get("gate") or None
    points = []
    for role in ("committed", "best"):
        trial = document.get(role)
        if not trial or trial.get("status") != "measured":
            continue
        raw = trial.get("point") or {}
        point = {
            "key": f"{name} {role}",
            **_point(raw, raw.get("windows") or []),
            "batch_size": raw.get("batch_size"),
            "concurrency": raw.get("concurrency"),
            "configuration": (trial.get("candidate") or {}).get("label"),
            "avg_batch_size": _number(raw.get("server_avg_batch")),
            "passed": None if gate is None else bool(gate.get("passed")) or role == "best",
        }
        points.append(point)
    disqualified = [
        f"candidate {c.get('index')} ({(c.get('candidate') or {}).get('label')}) disqualified: "
        + str(c.get("message", "")).splitlines()[0]
        for c in document.get("candidates", [])
        if c.get("status") == "disqualified"
    ]
    return {
        "name": name,
        "source": source,
        "kind": "triton-tune",
        "host": None,
        "model": tune.get("model"),
        "unit": tune.get("unit"),
        "passed": None if gate is None else bool(gate.get("passed")),
        "checks": [],
        "failed": [] if gate is None or gate.get("passed") else [str(gate.get("message"))],
        "points": points,
        "server": [],
        "warnings": disqualified
        + ([f"stopped early: {tune['stopped']}"] if tune.get("stopped") else []),
        "targets": {k: v for k, v in (tune.get("constraints") or {}).items() if v is not None},
        "stability": None,
    }
