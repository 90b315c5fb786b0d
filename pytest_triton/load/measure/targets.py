"""Release targets of a load test and the verdict against them (no locust import here).

Names follow model_analyzer's constraints (`perf_latency_p99` max in ms, `perf_throughput` min
in samples/s) so a target written for model_analyzer reads the same here. Throughput counts
samples (requests x batch size), as NVIDIA's examples report rec/s, img/s and seq/s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_triton.base.config import TARGETS, TritonConfig
from pytest_triton.base.errors import ConfigError

TARGET_DEFS = TARGETS
"""The target rows of the settings table (name, unit, bound, flag, env var)."""
BY_NAME = {t.name: t for t in TARGET_DEFS}
COUNTED_ALWAYS = ("wrong_answers", "perf_fail_ratio")
"""Judged even when no request succeeded (every answer wrong, every request failed: the
worst case, not an unmeasured one)."""


class Targets:
    """Limits of one run by target name; None means no target (the figure is still reported).

    Values are checked by the same parsers as the command line, so a bad limit reads the same
    wherever it was set.
    """

    def __init__(self, **limits: float | None) -> None:
        unknown = sorted(set(limits) - set(BY_NAME))
        if unknown:
            raise ConfigError(f"unknown target(s) {unknown}; known: {', '.join(BY_NAME)}")
        self.limits: dict[str, float | None] = {}
        for t in TARGET_DEFS:
            value = limits.get(t.name)
            if value is not None:
                value = t.convert(str(value), f"target {t.name}")
            self.limits[t.name] = value

    @classmethod
    def from_config(cls, config: TritonConfig) -> Targets:
        return cls(**{t.name: config.value(t.name) for t in TARGET_DEFS})

    def __getattr__(self, name: str) -> float | None:
        if name in BY_NAME:
            return self.limits[name]
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Targets) and other.limits == self.limits

    def __hash__(self) -> int:
        return hash(tuple(self.limits.items()))

    def __repr__(self) -> str:
        set_ = ", ".join(f"{k}={v}" for k, v in self.limits.items() if v is not None)
        return f"Targets({set_})"

    def merged(self, overrides: Mapping[str, float | None]) -> Targets:
        """These targets with every non-None override applied."""
        return Targets(**{**self.limits, **{k: v for k, v in overrides.items() if v is not None}})


class Rates:
    """Rates of requests over a duration: a run's figures and a sweep's points alike."""

    requests: int
    failures: int
    duration_s: float
    avg_ms: float
    p95_ms: float
    p99_ms: float
    wrong_answers: int = 0  # answers checked and found wrong (a run's; a sweep counts none)
    agreement_samples: int = 0  # samples of compared answers judged by agreement

    def successful_samples(self) -> int:
        raise NotImplementedError

    @property
    def successes(self) -> int:
        return self.requests - self.failures

    @property
    def throughput(self) -> float:
        """Successful samples (rows of a batch) per second."""
        return self.successful_samples() / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def request_rate(self) -> float:
        """Successful requests per second."""
        return self.successes / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def fail_ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def value(self, name: str) -> float:
        """The figure a target of this name limits (NaN where this kind of result has none:
        goodput without an SLO, memory growth without a soak)."""
        figures = {
            "perf_latency_avg": self.avg_ms,
            "perf_latency_p95": self.p95_ms,
            "perf_latency_p99": self.p99_ms,
            "perf_throughput": self.throughput,
            "perf_fail_ratio": self.fail_ratio,
            "wrong_answers": float(self.wrong_answers),
        }
        if name in figures:
            return figures[name]
        value = getattr(self, OPTIONAL_FIGURES[name], None)
        return math.nan if value is None else float(value)


OPTIONAL_FIGURES = {
    "perf_goodput": "goodput",
    "perf_memory_growth_mb_per_min": "memory_growth_mb_per_min",
    "perf_p99_drift": "p99_drift_pct",
    "perf_ttft_p99": "ttft_p99_ms",
    "perf_itl_p99": "itl_p99_ms",
    "perf_output_tokens_per_s": "output_tokens_per_s",
    "perf_stream_goodput": "stream_goodput",
    "answer_agreement": "answer_agreement",
}
"""Targets on figures only some runs have: their rows appear where the figure was measured or
a limit was set."""
WHOLE_RUN = frozenset({"perf_fail_ratio", "wrong_answers", *OPTIONAL_FIGURES})
"""Targets judged on the whole run (after its warm-up), not on the stable windows."""


@dataclass(frozen=True)
class Measured(Rates):
    """What the client saw over a run (latencies in ms, over all requests as Locust logs them)."""

    requests: int
    failures: int
    samples: int  # successful requests x their batch size
    duration_s: float
    avg_ms: float
    p95_ms: float
    p99_ms: float
    p50_ms: float = math.nan  # reported (the gate report's plot), no target limits it
    goodput: float = math.nan  # share of requests successful within --perf-slo-ms
    memory_growth_mb_per_min: float = math.nan  # soak: fitted slope of the server's memory
    p99_drift_pct: float = math.nan  # soak: p99 of the last third over the first, in %
    ttft_p99_ms: float = math.nan  # streams: time to first token (stream_log.py)
    itl_p99_ms: float = math.nan  # streams: inter-token latency
    output_tokens_per_s: float = math.nan  # streams: tokens of the streams after warm-up
    stream_goodput: float = math.nan  # streams: share within --perf-slo-ttft-ms / -itl-ms
    wrong_answers: int = 0  # failed requests whose answer came back but was not PyTorch's
    answer_agreement: float = math.nan  # share of compared samples agreeing with the reference
    agreement_samples: int = 0  # how many samples that share is of

    def successful_samples(self) -> int:
        return self.samples


@dataclass(frozen=True)
class Check:
    """One verdict row; passed is None where no target was set."""

    name: str
    unit: str
    kind: Literal["max", "min"]
    limit: float | None
    measured: float
    passed: bool | None
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} ({self.unit})" if self.unit else self.name


def evaluate(targets: Targets, measured: Rates, whole: Rates | None = None) -> list[Check]:
    """A row per target; a run without one successful request fails every target it has.

    `measured` is what throughput and latency are judged on (a stable measurement's windows);
    `whole`, when given, is the whole run, which the failure ratio and the count of successful
    requests are judged on: a failure outside the measured windows still counts.
    """
    whole = whole or measured
    checks = [
        Check(
            "successful requests",
            "",
            "min",
            1,
            whole.successes,
            whole.successes >= 1,
            "" if whole.successes else "no request succeeded: nothing was measured",
        )
    ]
    for t in TARGET_DEFS:
        kind: Literal["max", "min"] = "min" if t.bound == "min" else "max"
        limit = targets.limits[t.name]
        value = (whole if t.name in WHOLE_RUN else measured).value(t.name)
        if limit is None:
            if not (t.name in OPTIONAL_FIGURES and math.isnan(value)):
                checks.append(Check(t.name, t.unit, kind, None, value, None))
            continue
        if t.name in COUNTED_ALWAYS:
            checks.append(Check(t.name, t.unit, kind, limit, value, value <= limit))
            continue
        if whole.successes == 0 or measured.successes == 0 or math.isnan(value):
            checks.append(Check(t.name, t.unit, kind, limit, math.nan, False, "not measured"))
            continue
        ok = value <= limit if kind == "max" else value >= limit
        checks.append(Check(t.name, t.unit, kind, limit, value, ok, _note(t.name, whole)))
    return checks


def _note(name: str, whole: Rates) -> str:
    """What a row's figure is of, where the number alone does not say."""
    if name == "answer_agreement":
        return f"top-1 agreement with the fp32 reference, N={whole.agreement_samples} samples"
    return ""


def failures(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.passed is False]


def _num(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    if float(value).is_integer() or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def describe_failure(check: Check) -> str:
    """'measured 160, target <= 20' (or 'not measured'), with the check's note."""
    if check.note == "not measured":
        return "not measured"
    if check.limit is None and check.note:  # a row standing for several (a shape's stage)
        return check.note
    sign = "<=" if check.kind == "max" else ">="
    limit = check.limit if check.limit is not None else math.nan
    return f"measured {_num(check.measured)}, target {sign} {_num(limit)}" + (
        f" ({check.note})" if check.note else ""
    )


def verdict_table(checks: Sequence[Check], title: str = "Verdict") -> str:
    """The target | limit | measured | pass table, then one line naming every failed target."""
    header = ("target", "limit", "measured", "pass")
    rows = []
    for c in checks:
        sign = "<=" if c.kind == "max" else ">="
        limit = f"{sign} {_num(c.limit)}" if c.limit is not None else "-"
        state = (c.note or "no target") if c.passed is None else ("PASS" if c.passed else "FAIL")
        rows.append((c.label, limit, _num(c.measured), state))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    out = [title, line(header), line(["-" * w for w in widths]), *map(line, rows)]
    failed = failures(checks)
    if failed:
        named = "; ".join(f"{c.label} {describe_failure(c)}" for c in failed)
        out.append(f"RESULT: FAIL - {named}")
    else:
        out.append("RESULT: PASS")
    return "\n".join(out)
