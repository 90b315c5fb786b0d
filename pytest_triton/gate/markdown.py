"""report.md: the gate report for a reviewer (and GitHub's job summary)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from pytest_triton.base.version import DISTRIBUTION

PLOTS = {"parity": "parity-headroom.png", "load": "load-latency.png"}


def num(value: Any, digits: int = 3) -> str:
    if value is None or isinstance(value, bool):
        return "n/a"
    if isinstance(value, int) or (float(value).is_integer() and abs(value) >= 1):
        return f"{value:,.0f}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def pct(fraction: float | None) -> str:
    if fraction is None:
        return "n/a"
    return f"{fraction * 100:.2f}%" if fraction < 0.1 else f"{fraction * 100:.1f}%"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(cell(c) for c in row) + " |" for row in rows),
        "",
    ]


def render(document: Mapping[str, Any], *, images: bool = True, plots: Sequence[str] = ()) -> str:
    verdict = document["verdict"]
    counts = document["session"]["tests"]
    lines = [f"# Release gate: {'PASS' if verdict['passed'] else 'FAIL'}", ""]
    gated_by = document["environment"]["packages"].get(DISTRIBUTION)
    if gated_by:  # the version that judged this run, before anything else
        lines += [f"Gated by {DISTRIBUTION} {gated_by}.", ""]
    lines += [f"- {reason}" for reason in verdict["reasons"]]
    if verdict["reasons"]:
        lines.append("")
    tests = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no tests"
    lines += [
        f"Tests: {tests} in "
        f"{document['session']['duration_s']:.0f} s ({document['created']})."
        + (
            f" JUnit XML: `{document['session']['junit']}`." if document["session"]["junit"] else ""
        ),
        "",
    ]
    lines += _servers(document)
    lines += _parity(document, images and PLOTS["parity"] in plots)
    lines += _accuracy(document)
    lines += _batching(document)
    lines += _pipelines(document)
    lines += _load(document, images and PLOTS["load"] in plots)
    lines += _baseline(document)
    lines += _skipped_and_failed(document)
    return "\n".join(lines).rstrip() + "\n"


def _servers(document: Mapping[str, Any]) -> list[str]:
    env = document["environment"]
    packages = ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v)
    lines = ["## Server and versions", ""]
    if document["servers"]:
        lines += table(
            ["launcher", "endpoint", "tritonserver", "backends", "device", "image", "requests"],
            [
                (
                    s["launcher"],
                    s["http"],
                    s.get("tritonserver_version") or "n/a",
                    ", ".join(s["backends"]),
                    s["device"],
                    s.get("image") or "-",
                    _request_paths(s),
                )
                for s in document["servers"]
            ],
        )
    else:
        lines += ["No server was started in this session.", ""]
    return [*lines, f"Python {env['python']} on {env['platform']}; {packages}.", ""]


def _request_paths(server: Mapping[str, Any]) -> str:
    """Which client the checks and the load went through, per protocol (older documents
    did not say)."""
    paths = server.get("request_paths") or {}
    return (
        "; ".join(
            f"{protocol}: checks over {p['checks']}, load over {p['load']}"
            for protocol, p in paths.items()
        )
        or "-"
    )


def _parity(document: Mapping[str, Any], image: bool) -> list[str]:
    rows = document["parity"]
    lines = ["## Parity: served vs PyTorch", ""]
    if not rows:
        return [*lines, "No parity check ran.", ""]
    lines += [
        "Headroom used: the largest |served - native| / (atol + rtol x |native|) over "
        "every element, torch.testing's allowance; 100% is the tolerance. Worst over "
        "every check of the row.",
        "",
    ]
    lines += table(
        [
            "variant",
            "protocol",
            "transport",
            "checks",
            "worst output",
            "max abs diff",
            "max rel diff",
            "rtol / atol",
            "headroom used",
            "result",
        ],
        [
            (
                r["variant"],
                r["protocol"],
                r["transport"],
                r["checks"],
                f"{r['worst_output']} ({r['dtype']})",
                num(r["max_abs"]),
                num(r["max_rel"]),
                f"{num(r['rtol'])} / {num(r['atol'])}",
                pct(r["headroom_used"]),
                "PASS" if r["ok"] else "FAIL",
            )
            for r in rows
        ],
    )
    if image:
        lines += [f"![parity headroom per variant]({PLOTS['parity']})", ""]
    return lines


def _accuracy(document: Mapping[str, Any]) -> list[str]:
    rows = document.get("accuracy") or []  # reports written before 0.2 have none
    if not rows:
        return []
    lines = [
        "## Accuracy: served vs fp32 PyTorch on a dataset",
        "",
        "The metric of the served answers and of fp32 PyTorch's on the same data; the rule is "
        "MLPerf's (served >= ratio x reference). Interval: 95%, of the served value.",
        "",
    ]
    return lines + table(
        [
            "variant",
            "dataset",
            "N",
            "metric",
            "served",
            "reference",
            "ratio",
            "interval",
            "threshold",
            "result",
        ],
        [
            (
                r["variant"],
                r.get("dataset") or "-",
                r["samples"],
                f"{r['metric']} (vs {r['against']})",
                f"{r['served']:.4f}",
                f"{r['reference']:.4f}",
                f"{r['ratio']:.4f}",
                f"[{r['interval'][0]:.4f}, {r['interval'][1]:.4f}]",
                f"{r['threshold']:.4f} ({r['rule']})",
                "PASS" if r["ok"] else "FAIL",
            )
            for r in rows
        ],
    )


def _batching(document: Mapping[str, Any]) -> list[str]:
    rows = document["batching"]
    if not rows:
        return []
    lines = [
        "## Dynamic batching",
        "",
        "Requests sent together and the executions Triton ran for them (statistics API); "
        "fewer executions than requests means the dynamic batcher combined them.",
        "",
    ]
    return lines + table(
        [
            "variant",
            "protocol",
            "transport",
            "requests",
            "executions",
            "inferences",
            "avg batch size",
            "batch sizes (size x executions)",
        ],
        [
            (
                r["variant"],
                r["protocol"],
                r["transport"],
                r["requests"],
                r["executions"],
                r["inferences"],
                f"{r['avg_batch_size']:.2f}",
                ", ".join(f"{k} x {v}" for k, v in r["batch_histogram"].items()) or "-",
            )
            for r in rows
        ],
    )


def _pipelines(document: Mapping[str, Any]) -> list[str]:
    rows = document.get("pipelines") or []
    if not rows:
        return []
    lines = [
        "## Pipelines",
        "",
        "Each pipeline in each mode against its steps composed in PyTorch; a failed check names "
        "the first step whose served model, asked alone with PyTorch's inputs for it, answers "
        "otherwise. Batching: each composing model's statistics while single-row requests were "
        "in flight together (a sync BLS model calls its steps one request at a time).",
        "",
    ]

    def verdict(ok: bool | None, yes: str, no: str) -> str:
        return "not checked" if ok is None else (yes if ok else no)

    lines += table(
        [
            "pipeline",
            "mode",
            "front model",
            "protocols",
            "parity",
            "first diverging step",
            "every step batched",
        ],
        [
            (
                r["pipeline"],
                r["mode"],
                r["front_model"],
                ", ".join(r["paths"]),
                verdict(r["parity_ok"], f"PASS ({r['parity_checks']})", "FAIL"),
                r["first_diverging_step"] or (r["divergence"] or "-"),
                verdict(r["batched"], "yes", "NO"),
            )
            for r in rows
        ],
    )
    steps = [(r, s) for r in rows for s in r["steps"]]
    if steps:
        lines += table(
            [
                "pipeline",
                "mode",
                "step",
                "model",
                "requests",
                "executions",
                "avg batch size",
                "batch sizes (size x executions)",
                "batched",
            ],
            [
                (
                    r["pipeline"],
                    r["mode"],
                    s["step"],
                    s["model"],
                    s["requests"],
                    s["executions"],
                    f"{s['avg_batch_size']:.2f}",
                    ", ".join(f"{k} x {v}" for k, v in s["batch_histogram"].items()) or "-",
                    "yes" if s["batched"] else "NO",
                )
                for r, s in steps
            ],
        )
    return lines


def _load(document: Mapping[str, Any], image: bool) -> list[str]:
    runs = document["load"]
    if not runs and not document["problems"]:
        return []
    lines = ["## Load", ""]
    rows = []
    for run in runs:
        verdict = {True: "PASS", False: "FAIL", None: "no targets"}[run["passed"]]
        for p in run["points"]:
            windows = len(p.get("windows") or []) or 1
            rows.append(
                (
                    p.get("key", run["name"]),
                    run["kind"],
                    run.get("model") or "-",
                    num(p["throughput"]),
                    num(p["p50_ms"]),
                    num(p["p95_ms"]),
                    num(p["p99_ms"]),
                    f"{p['requests']:,} ({p['failures']})",
                    windows,
                    verdict,
                )
            )
    lines += table(
        [
            "run",
            "tool",
            "model",
            "throughput (samples/s)",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "requests (failed)",
            "windows",
            "verdict",
        ],
        rows,
    )
    notes = []
    for run in runs:
        checks = [c for c in run["checks"] if c.get("limit") is not None]
        if checks:
            notes.append(
                f"Targets of {run['name']}: "
                + "; ".join(
                    f"{c['name']} {'<=' if c['kind'] == 'max' else '>='} {num(c['limit'])}"
                    f"{' ' + c['unit'] if c.get('unit') else ''}: "
                    f"{num(c['measured'])} {_state(c)}"
                    for c in checks
                )
            )
        notes += [
            f"Server view of {s['model']} in {run['name']}: avg batch size "
            f"{s['avg_batch_size']:.2f}, {s['execution_count']:,} executions for "
            f"{s['inference_count']:,} inferences ({s['success_count']:,} requests)."
            for s in run["server"]
        ]
        if run.get("stability"):
            notes.append(f"Measurement windows of {run['name']}: {run['stability']}")
        notes += [
            f"Stage {st['index']} of {run['name']} ({st['label']}): {num(st['throughput'])} "
            f"samples/s, p99 {num(st['p99_ms'])} ms, {st['failures']} failed"
            + (f", goodput {num(st['goodput'])}" if _finite(st.get("goodput")) else "")
            + f": {'PASS' if st['passed'] else 'FAIL'}"
            for st in run.get("stages") or []
        ]
        soak = run.get("soak")
        if soak:
            notes.append(
                f"Soak of {run['name']}: memory ({soak['memory_source']}) "
                f"{num(soak['memory_first_mb'])} -> {num(soak['memory_last_mb'])} MB, "
                f"{num(soak['memory_growth_mb_per_min'])} MB/min over the steady part; p99 "
                f"drift {num(soak['p99_drift_pct'])}%"
            )
        streams = run.get("streams")
        if streams:
            notes.append(
                f"Streams of {run['name']}: {streams['streams']:,} streams, "
                f"{num(streams['output_tokens_per_s'])} output tokens/s; time to first token "
                f"p50 {num(streams['ttft_p50_ms'])} / p99 {num(streams['ttft_p99_ms'])} ms, "
                f"inter-token latency p50 {num(streams['itl_p50_ms'])} / p99 "
                f"{num(streams['itl_p99_ms'])} ms"
                + (
                    f", goodput {num(streams['goodput'])}"
                    if streams.get("good_streams") and _finite(streams.get("goodput"))
                    else ""
                )
                + (_stream_counts(streams["run"]) if streams.get("run") else "")
                + "."
            )
        if run.get("wrong_answers") is not None:
            notes.append(f"Answers of {run['name']} checked: {run['wrong_answers']} wrong.")
        notes += failure_notes(run)
        if _finite(run.get("goodput")):
            notes.append(
                f"Goodput of {run['name']}: {num(run['goodput'])} of the requests succeeded "
                f"within {num(run.get('slo_ms'))} ms."
            )
        notes += _perf_goodput(run)
        update = run.get("update")
        if update:
            notes.append(
                f"Model update in {run['name']}: {update['model']} version "
                f"{update['old_version']} -> {update['new_version']}, "
                + (
                    f"p99 {num(update['p99_during_switch_ms'])} ms during the switch, "
                    f"{update['requests_after_switch']} requests after it"
                    if update.get("done")
                    else f"not done ({update.get('error') or 'the run ended before it'})"
                )
                + "."
            )
        notes += [f"{run['name']}: {w}" for w in run["warnings"]]
        if run.get("before_session"):
            notes.append(
                f"{run['source']} was written before this session started (at "
                f"{_time(run['written'])}): its figures are not from this run."
            )
    notes += [f"Problem: {p}" for p in document["problems"]]
    lines += [f"- {note}" for note in notes]
    if image:
        lines += ["", f"![latency vs throughput]({PLOTS['load']})"]
        for run in runs:  # a soak's plots, beside its load-*.json
            lines += [f"\n![{run['name']}: {name}]({name})" for name in run.get("figures") or []]
    return [*lines, ""]


def failure_notes(run: Mapping[str, Any]) -> list[str]:
    """Each point's failed requests by reason, the first example of the most frequent, and
    its answers checked."""
    notes = []
    for p in run["points"]:
        reasons = list(p.get("failure_reasons") or [])  # most frequent first, as written
        checked = p.get("answers_checked")
        if checked is not None and run["kind"] != "locust":
            notes.append(
                f"Answers of {p.get('key', run['name'])} checked: {checked:,}, "
                f"{p.get('wrong_answers') or 0:,} wrong."
            )
        if reasons:
            top = reasons[0]
            notes.append(
                f"Failed requests of {p.get('key', run['name'])} by reason: "
                + "; ".join(f"{r['count']:,} {r['reason']}" for r in reasons)
                + f" (the first of {top['reason']}: {' '.join(str(top['example']).split())[:300]})."
            )
    return notes


def _perf_goodput(run: Mapping[str, Any]) -> list[str]:
    """triton-perf's goodput per point and its answer to --latency-bound."""
    notes = []
    measured = [p for p in run["points"] if _finite(p.get("goodput"))]
    if run["kind"] == "triton-perf" and measured:
        notes.append(
            f"Goodput of {run['name']} (share of requests within {num(run.get('slo_ms'))} ms): "
            + ", ".join(f"{p['key']} {num(p['goodput'])}" for p in measured)
            + "."
        )
    held = run.get("within_bound")
    if held:
        if _finite(run.get("goodput_target")):
            bound = f"goodput >= {num(run['goodput_target'])} within {num(run.get('slo_ms'))} ms"
        else:
            bound = f"p{run.get('percentile') or 99} within {num(run.get('latency_bound_ms'))} ms"
        notes.append(
            f"Highest load of {run['name']} with {bound}: "
            + "; ".join(
                f"{h.get('where') or 'batch ' + str(h['batch_size'])}: {h['load']} "
                f"({num(h['throughput'])} samples/s, "
                f"p99 {num(h['p99_ms'])} ms"
                + (f", goodput {num(h['goodput'])}" if _finite(h.get("goodput")) else "")
                + ")"
                if h["load"]
                else f"{h.get('where') or 'batch ' + str(h['batch_size'])}: no measured load"
                for h in held
            )
            + "."
        )
    return notes


def _stream_counts(run: Mapping[str, Any]) -> str:
    """The whole run's streams counted once (as the printed verdict counts them)."""
    complete, failed = run["streams"], run.get("failed_streams", 0)
    checked, mismatched = run["checked_streams"], run["mismatched_streams"]
    return (
        f"; whole run {complete + failed:,} streams ended = {complete:,} complete + "
        f"{failed:,} failed, {checked:,} checked token by token = {checked - mismatched:,} "
        f"agreed + {mismatched:,} mismatched"
    )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _state(check: Mapping[str, Any]) -> str:
    """PASS / FAIL, or why a limit did not decide (an unstable measurement that was allowed)."""
    if check["passed"] is None:
        return f"not gating ({check.get('note') or 'reported only'})"
    return "PASS" if check["passed"] else "FAIL"


def _time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def _baseline(document: Mapping[str, Any]) -> list[str]:
    baseline = document.get("baseline")
    if not baseline:
        return []
    limits = baseline["limits"]
    lines = [
        f"## Baseline: {baseline['file']}",
        "",
        f"Limits: throughput down at most {limits['throughput_drop_pct']:g}%, p99 up at "
        f"most {limits['p99_rise_pct']:g}% (medians over measurement windows), parity "
        f"headroom used at most {limits['headroom_pct']:g}%.",
        "",
    ]
    lines += table(
        ["kind", "what", "metric", "baseline", "now", "change", "limit", "windows", "result"],
        [
            (
                c["kind"],
                c["what"],
                c["metric"],
                num(c["baseline"]),
                num(c["now"]),
                "-" if c["change_pct"] is None else f"{c['change_pct']:+.1f}%",
                f"{c['limit_pct']:g}%",
                c["windows"] or "-",
                "REGRESSION" if c["regressed"] else "ok",
            )
            for c in baseline["comparisons"]
        ],
    )
    if any(c["windows"] == 1 for c in baseline["comparisons"]):
        lines += [
            "Load figures measured in a single window are compared as they are: keep the "
            "limits above this machine's run-to-run noise.",
            "",
        ]
    if baseline["not_measured"]:
        lines += [
            "In the baseline but not measured now: " + ", ".join(baseline["not_measured"]),
            "",
        ]
    return lines


def _skipped_and_failed(document: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    if document["failed"]:
        lines += [
            "## Failed",
            "",
            *table(
                ["test", "message"], [(f["test"], f["message"][:300]) for f in document["failed"]]
            ),
        ]
    if document["skipped"]:
        lines += [
            "## Skipped",
            "",
            *table(
                ["reason", "tests"],
                [
                    (
                        s["reason"],
                        f"{s['count']}: "
                        + ", ".join(s["tests"][:3])
                        + (", ..." if s["count"] > 3 else ""),
                    )
                    for s in document["skipped"]
                ],
            ),
        ]
    return lines
