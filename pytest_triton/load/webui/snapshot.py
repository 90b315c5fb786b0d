"""What the web UI's Triton tab, its charts page and PREFIX_triton.csv show: one snapshot of a
run, turned into table rows, CSV rows and JSON (no locust import here: `live` gathers the
figures inside the Locust process, this module only lays them out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_triton.client.stats import PHASES, ModelStats
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.latency_histogram import ms_text
from pytest_triton.load.measure.server_side import CPU_SATURATED_PERCENT, ModelReport

AGGREGATED = "Aggregated"  # Locust's name for the all-requests row
TAB_KEY = "triton"
TAB_COLUMNS = [
    {"key": "model", "title": "Model"},
    {"key": "figure", "title": "Figure"},
    {"key": "value", "title": "Value"},
    {"key": "target", "title": "Target"},
    {"key": "status", "title": "Status"},
]
PHASE_LABELS = {
    "queue": "queue",
    "compute_input": "compute input",
    "compute_infer": "compute infer",
    "compute_output": "compute output",
}
CSV_HEADER = [
    "Name",
    "Request Count",
    "Failure Count",
    "Samples",
    "Requests/s",
    "Samples/s",
    "Samples/Request",
    "Current Requests/s",
    "Current Samples/s",
    "50%",
    "95%",
    "99%",
    "Server Inference Count",
    "Server Execution Count",
    "Server Avg Batch Size",
    "Server Request (us)",
    *(f"Server {PHASE_LABELS[p].title()} (us)" for p in PHASES),
]


@dataclass(frozen=True)
class ModelFigures:
    """One model (= request name) now: the client's figures and the server's delta."""

    model: str
    requests: int
    failures: int
    samples: int
    request_rate: float  # requests/s now (Locust's current_rps)
    sample_rate: float  # samples/s now, over the same window
    avg_ms: float | None = None  # client latencies over the run
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    p99_now_ms: float | None = None  # over the last ~10 s: the chart's line
    server: ModelStats | None = None  # statistics delta since the start

    @property
    def successes(self) -> int:
        return self.requests - self.failures

    def report(self) -> ModelReport | None:
        if self.server is None:
            return None
        return ModelReport(self.model, self.server, self.successes, self.avg_ms)


@dataclass(frozen=True)
class StreamsNow:
    """The streams of a run driving decoupled models, so far (every worker's, on a master):
    latencies over the run (and the p99s over about the last 10 s: the charts' lines),
    output tokens/s over about the last 10 s and over the run, goodput where an SLO is set
    (None: none), and the streams compared token by token with the reference. Each stream
    that ended is counted once: complete (`streams`) or `failed`."""

    model: str  # the stream models' names
    streams: int  # complete: every token and the final flag
    failed: int
    tokens: int
    checked: int
    mismatched: int
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    tokens_per_s: float | None = None  # over about the last 10 s
    run_tokens_per_s: float | None = None  # over the run so far
    goodput: float | None = None
    ttft_p99_now_ms: float | None = None  # over about the last 10 s
    itl_p99_now_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class Snapshot:
    """A run as the tab shows it; `duration_s` is Locust's (first to last request)."""

    state: str
    elapsed_s: float
    duration_s: float
    models: Sequence[ModelFigures]
    checks: Sequence[tg.Check] = ()
    warnings: Sequence[str] = ()
    cpu_percent: float | None = None
    final: bool = False
    streams: StreamsNow | None = None


def number(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def histogram(stats: ModelStats) -> str:
    return ", ".join(f"{size} x {count}" for size, count in sorted(stats.batches.items()))


def _row(model: str, figure: str, value: str, target: str = "", status: str = "") -> dict[str, str]:
    return {"model": model, "figure": figure, "value": value, "target": target, "status": status}


def _model_rows(m: ModelFigures) -> list[dict[str, str]]:
    rows = [
        _row(m.model, "requests/s (now)", number(m.request_rate)),
        _row(m.model, "samples/s (now)", number(m.sample_rate)),
        _row(m.model, "requests (failed)", f"{m.requests:,} ({m.failures:,})"),
        _row(
            m.model,
            "samples per request",
            number(m.samples / m.successes if m.successes else None, 2),
        ),
        *(
            _row(m.model, f"client latency {label} (ms)", ms_text(value))
            for label, value in (("p50", m.p50_ms), ("p95", m.p95_ms), ("p99", m.p99_ms))
        ),
    ]
    s = m.server
    if s is None:
        return [*rows, _row(m.model, "server statistics", "not readable")]
    b = s.latency_breakdown_us()
    rows += [
        _row(m.model, "server inference count (samples)", f"{s.inference_count:,}"),
        _row(m.model, "server execution count", f"{s.execution_count:,}"),
        _row(m.model, "server avg batch size", number(s.avg_batch_size, 2)),
        _row(m.model, "batch-size histogram (size x executions)", histogram(s) or "none"),
        _row(m.model, "server avg request (us)", number(b["request"], 0)),
        *(_row(m.model, f"server avg {PHASE_LABELS[p]} (us)", number(b[p], 0)) for p in PHASES),
    ]
    report = m.report()
    overhead = report.client_overhead_ms if report else None
    if overhead is not None:
        rows.append(_row(m.model, "client-side overhead (ms per request)", number(overhead, 2)))
    return rows


def _stream_rows(s: StreamsNow, final: bool) -> list[dict[str, str]]:
    rate = (
        _row(s.model, "output tokens/s (run average)", number(s.run_tokens_per_s))
        if final
        else _row(s.model, "output tokens/s (now)", number(s.tokens_per_s))
    )
    goodput = (
        number(s.goodput, 3)
        if s.goodput is not None
        else "no SLO (--perf-slo-ttft-ms / --perf-slo-itl-ms)"
    )
    return [
        _row(
            s.model,
            "streams ended (complete + failed)",
            f"{s.streams + s.failed:,} ({s.streams:,} + {s.failed:,})",
        ),
        _row(s.model, "time to first token p50 (ms)", ms_text(s.ttft_p50_ms)),
        _row(s.model, "time to first token p99 (ms)", ms_text(s.ttft_p99_ms)),
        _row(s.model, "inter-token latency p50 (ms)", ms_text(s.itl_p50_ms)),
        _row(s.model, "inter-token latency p99 (ms)", ms_text(s.itl_p99_ms)),
        rate,
        _row(s.model, "stream goodput", goodput),
        _row(
            s.model,
            "streams checked (agreed + mismatched)",
            f"{s.checked:,} ({s.checked - s.mismatched:,} + {s.mismatched:,})",
        ),
    ]


def tab_rows(snapshot: Snapshot | None, refusal: str = "") -> list[dict[str, str]]:
    """The Triton tab's table: per model its figures, the streams' (where decoupled models
    are driven), then the targets, the load generator and its warnings, and the verdict so
    far. A run refused at its start (a 401, a TLS failure) shows only why: the web UI's
    person would otherwise see a run that stopped at once and nothing else."""
    if refusal:
        return [_row("-", "refused before any load", refusal, "", "REFUSED")]
    if snapshot is None:
        return [_row("-", "no test has run yet", "start one: the figures appear here live")]
    rows = [r for m in snapshot.models for r in _model_rows(m)]
    if snapshot.streams is not None:
        rows += _stream_rows(snapshot.streams, snapshot.final)
    for c in snapshot.checks:
        sign = "<=" if c.kind == "max" else ">="
        target = f"{sign} {number(c.limit)}" if c.limit is not None else "-"
        status = "no target" if c.passed is None else ("PASS" if c.passed else "FAIL")
        rows.append(_row(AGGREGATED, c.label, number(c.measured), target, status))
    if snapshot.cpu_percent is not None:
        saturated = snapshot.cpu_percent >= CPU_SATURATED_PERCENT
        when = "run average" if snapshot.final else "now"
        rows.append(
            _row(
                AGGREGATED,
                f"load generator CPU (% of a core, {when})",
                number(snapshot.cpu_percent, 0),
                f"< {CPU_SATURATED_PERCENT:.0f}",
                "SATURATED" if saturated else "OK",
            )
        )
    rows += [
        _row(AGGREGATED, "warning", w.removeprefix("WARNING: "), "", "WARNING")
        for w in snapshot.warnings
    ]
    if snapshot.checks:
        failed = tg.failures(snapshot.checks)
        verdict = (
            "FAIL - " + "; ".join(f"{c.label} {tg.describe_failure(c)}" for c in failed)
            if failed
            else "PASS"
        )
        label = "verdict" if snapshot.final else "verdict so far"
        rows.append(_row(AGGREGATED, label, verdict, "", "FAIL" if failed else "PASS"))
    return rows


def csv_rows(snapshot: Snapshot) -> list[list[Any]]:
    """PREFIX_triton.csv: Locust's stats CSV per model, in samples, with the server's view."""
    duration = snapshot.duration_s

    def rate(count: int) -> float:
        return count / duration if duration > 0 else 0.0

    rows: list[list[Any]] = [CSV_HEADER]
    for m in snapshot.models:
        s = m.server
        server: list[Any] = [""] * (4 + len(PHASES))
        if s is not None:
            b = s.latency_breakdown_us()
            server = [
                s.inference_count,
                s.execution_count,
                round(s.avg_batch_size, 3),
                round(b["request"], 1),
                *(round(b[p], 1) for p in PHASES),
            ]
        rows.append(
            [
                m.model,
                m.requests,
                m.failures,
                m.samples,
                round(rate(m.successes), 3),
                round(rate(m.samples), 3),
                round(m.samples / m.successes, 3) if m.successes else "",
                round(m.request_rate, 3),
                round(m.sample_rate, 3),
                *(round(v, 3) if v is not None else "" for v in (m.p50_ms, m.p95_ms, m.p99_ms)),
                *server,
            ]
        )
    requests = sum(m.requests for m in snapshot.models)
    failures = sum(m.failures for m in snapshot.models)
    samples = sum(m.samples for m in snapshot.models)
    rows.append(
        [
            AGGREGATED,
            requests,
            failures,
            samples,
            round(rate(requests - failures), 3),
            round(rate(samples), 3),
            round(samples / (requests - failures), 3) if requests > failures else "",
            round(sum(m.request_rate for m in snapshot.models), 3),
            round(sum(m.sample_rate for m in snapshot.models), 3),
            *[""] * (3 + 4 + len(PHASES)),
        ]
    )
    return rows


def chart_point(snapshot: Snapshot) -> dict[str, Any]:
    """One point of the charts' time axis (the streams' lines where the run has streams)."""
    s = snapshot.streams
    return {
        "t": round(snapshot.elapsed_s, 1),
        "streams": (
            {
                "tokens_s": s.tokens_per_s,
                "ttft_p99_ms": s.ttft_p99_now_ms,
                "itl_p99_ms": s.itl_p99_now_ms,
            }
            if s is not None
            else None
        ),
        "models": {
            m.model: {
                "samples_s": m.sample_rate,
                "requests_s": m.request_rate,
                "p99_ms": m.p99_now_ms,
            }
            for m in snapshot.models
        },
    }


def as_json(
    snapshot: Snapshot | None, history: Sequence[dict[str, Any]], refusal: str = ""
) -> dict[str, Any]:
    """The charts page's data: the tab's rows, each model's breakdown and histogram, the
    history of samples/s and p99; a refused run's reason."""
    models = []
    for m in snapshot.models if snapshot else ():
        s = m.server
        models.append(
            {
                "model": m.model,
                "samples_s": m.sample_rate,
                "requests_s": m.request_rate,
                "p50_ms": m.p50_ms,
                "p95_ms": m.p95_ms,
                "p99_ms": m.p99_ms,
                "avg_batch_size": s.avg_batch_size if s else None,
                "histogram": {str(k): v for k, v in sorted(s.batches.items())} if s else {},
                "breakdown_us": (
                    {k: v for k, v in s.latency_breakdown_us().items() if k != "request"}
                    if s
                    else {}
                ),
            }
        )
    return {
        "state": "refused" if refusal else (snapshot.state if snapshot else "ready"),
        "refusal": refusal or None,
        "elapsed_s": snapshot.elapsed_s if snapshot else 0.0,
        "final": snapshot.final if snapshot else False,
        "warnings": list(snapshot.warnings) if snapshot else [],
        "rows": tab_rows(snapshot, refusal),
        "models": models,
        "streams": snapshot.streams.as_dict() if snapshot and snapshot.streams else None,
        "history": list(history),
    }
