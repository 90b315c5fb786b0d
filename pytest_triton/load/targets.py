"""Release targets of a load test and the verdict against them (no locust import here).

Names follow model_analyzer's constraints (`perf_latency_p99` max in ms, `perf_throughput` min
in samples/s) so a target written for model_analyzer reads the same here. Throughput counts
samples (requests x batch size), as the seeds report rec/s, img/s and seq/s.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Literal


@dataclass(frozen=True)
class TargetDef:
    """One target: where it is set (CLI flag, env var) and which way it must hold."""

    name: str
    unit: str
    kind: Literal["max", "min"]
    help: str

    @property
    def cli(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "TRITON_" + self.name.upper()

    @property
    def dest(self) -> str:
        return self.name


TARGET_DEFS: tuple[TargetDef, ...] = (
    TargetDef("perf_latency_avg", "ms", "max", "average client latency must stay below this"),
    TargetDef("perf_latency_p95", "ms", "max", "95th percentile client latency must stay below"),
    TargetDef("perf_latency_p99", "ms", "max", "99th percentile client latency must stay below"),
    TargetDef("perf_throughput", "samples/s", "min",
              "successful samples per second (requests x batch size) must reach this"),
    TargetDef("perf_fail_ratio", "", "max", "failed / all requests must stay at or below this "
              "(0 = no failure allowed)"),
)
BY_NAME = {t.name: t for t in TARGET_DEFS}


@dataclass(frozen=True)
class Targets:
    """Limits of one run; None means no target (the measurement is still reported)."""

    perf_latency_avg: float | None = None
    perf_latency_p95: float | None = None
    perf_latency_p99: float | None = None
    perf_throughput: float | None = None
    perf_fail_ratio: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"target {f.name} must be a number >= 0, got {value!r}")
        if self.perf_fail_ratio is not None and self.perf_fail_ratio > 1:
            raise ValueError(f"perf_fail_ratio is a ratio in 0..1, got {self.perf_fail_ratio}")

    def merged(self, overrides: Mapping[str, float | None]) -> Targets:
        """These targets with every non-None override applied (CLI/env over locustfile)."""
        values = asdict(self)
        values.update({k: v for k, v in overrides.items() if k in values and v is not None})
        return Targets(**values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Targets:
        """TRITON_PERF_LATENCY_P99=50 and friends; a bad value names the variable."""
        environ = os.environ if environ is None else environ
        values: dict[str, float | None] = {}
        for t in TARGET_DEFS:
            raw = environ.get(t.env, "").strip()
            if raw:
                try:
                    values[t.name] = float(raw)
                except ValueError:
                    raise ValueError(f"{t.env}={raw!r} is not a number") from None
        return cls(**values)


@dataclass(frozen=True)
class Measured:
    """What the client saw over a run (latencies in ms, over all requests as Locust logs them)."""

    requests: int
    failures: int
    samples: int  # successful requests x their batch size
    duration_s: float
    avg_ms: float
    p95_ms: float
    p99_ms: float

    @property
    def successes(self) -> int:
        return self.requests - self.failures

    @property
    def throughput(self) -> float:
        """Samples per second over the run."""
        return self.samples / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def request_rate(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def fail_ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def value(self, name: str) -> float:
        return {
            "perf_latency_avg": self.avg_ms,
            "perf_latency_p95": self.p95_ms,
            "perf_latency_p99": self.p99_ms,
            "perf_throughput": self.throughput,
            "perf_fail_ratio": self.fail_ratio,
        }[name]


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


def evaluate(targets: Targets, measured: Measured) -> list[Check]:
    """A row per target; a run without one successful request fails every target it has."""
    checks = [Check("successful requests", "", "min", 1, measured.successes,
                    measured.successes >= 1,
                    "" if measured.successes else "no request succeeded: nothing was measured")]
    for t in TARGET_DEFS:
        limit = getattr(targets, t.name)
        value = measured.value(t.name)
        if limit is None:
            checks.append(Check(t.name, t.unit, t.kind, None, value, None))
            continue
        if measured.successes == 0:
            checks.append(Check(t.name, t.unit, t.kind, limit, math.nan, False, "not measured"))
            continue
        ok = value <= limit if t.kind == "max" else value >= limit
        checks.append(Check(t.name, t.unit, t.kind, limit, value, ok))
    return checks


def failures(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.passed is False]


def _num(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    if float(value).is_integer() or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def verdict_table(checks: Sequence[Check], title: str = "Verdict") -> str:
    """The target | limit | measured | pass table, then one line naming every failed target."""
    header = ("target", "limit", "measured", "pass")
    rows = []
    for c in checks:
        sign = "<=" if c.kind == "max" else ">="
        limit = f"{sign} {_num(c.limit)}" if c.limit is not None else "-"
        state = "no target" if c.passed is None else ("PASS" if c.passed else "FAIL")
        rows.append((c.label, limit, _num(c.measured), state))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    out = [title, line(header), line(["-" * w for w in widths]), *map(line, rows)]
    failed = failures(checks)
    if failed:
        named = "; ".join(
            f"{c.label} not measured" if c.note == "not measured" else
            f"{c.label} measured {_num(c.measured)}, target {'<=' if c.kind == 'max' else '>='} "
            f"{_num(c.limit if c.limit is not None else math.nan)}"
            + (f" ({c.note})" if c.note else "") for c in failed)
        out.append(f"RESULT: FAIL - {named}")
    else:
        out.append("RESULT: PASS")
    return "\n".join(out)
