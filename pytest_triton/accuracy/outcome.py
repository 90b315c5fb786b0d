"""What one accuracy check found: the metric of the served answers and of the reference on
the same data, their ratio, the interval around the served value (for reading: the verdict
compares the value itself with the rule's threshold), the rule and its verdict, and where the
served model lost most when it failed."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec

P = ParamSpec("P")


@dataclass(frozen=True)
class AccuracyResult:
    """One accuracy check of one served model on one dataset."""

    model: str
    metric: str
    against: str  # "labels" or "reference"
    served: float
    reference: float
    samples: int
    interval: tuple[float, float]  # 95% interval of the served value: reported, not judged
    interval_method: str  # "wilson" or "bootstrap"
    min_ratio: float | None
    min_value: float | None
    worst: tuple[str, ...] = ()  # on failure: classes or samples where the served model lost most
    variant: str = ""  # the test id part of a served variant (mnist-onnx-int8-hosted)
    precision: str = ""
    dataset: str = ""  # what the caller called its dataset, for the report

    @property
    def ratio(self) -> float:
        """served / reference (1.0 when both are 0)."""
        if self.reference == 0:
            return 1.0 if self.served == 0 else math.inf
        return self.served / self.reference

    @property
    def threshold(self) -> float:
        """The value the served metric must reach: the stricter of the two rules."""
        rules = []
        if self.min_ratio is not None:
            rules.append(self.min_ratio * self.reference)
        if self.min_value is not None:
            rules.append(self.min_value)
        return max(rules, default=-math.inf)

    @property
    def ok(self) -> bool:
        return self.served >= self.threshold

    def rule(self) -> str:
        parts = []
        if self.min_ratio is not None:
            parts.append(f">= {self.min_ratio:g} x reference")
        if self.min_value is not None:
            parts.append(f">= {self.min_value:g}")
        return " and ".join(parts)

    def describe(self) -> str:
        low, high = self.interval
        lines = [
            f"accuracy {'ok' if self.ok else 'FAILED'}: model {self.model!r}, metric "
            f"{self.metric} (against {self.against}) served {self.served:.4f} vs fp32 "
            f"reference {self.reference:.4f}: ratio {self.ratio:.4f}, threshold "
            f"{self.threshold:.4f} ({self.rule()}), N={self.samples}; the served value's 95% "
            f"interval [{low:.4f}, {high:.4f}] ({self.interval_method}), for reading: the "
            "verdict compares the value itself"
        ]
        if self.worst and not self.ok:
            lines.append("  where the served model loses most:")
            lines += [f"    {w}" for w in self.worst]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        """The gate report's row."""
        return {
            "variant": self.variant or self.model,
            "precision": self.precision,
            "dataset": self.dataset,
            "model": self.model,
            "metric": self.metric,
            "against": self.against,
            "served": self.served,
            "reference": self.reference,
            "ratio": self.ratio,
            "samples": self.samples,
            "interval": list(self.interval),
            "interval_method": self.interval_method,
            "threshold": self.threshold,
            "rule": self.rule(),
            "ok": self.ok,
            "worst": list(self.worst),
        }


def asserting(
    measure: Callable[P, AccuracyResult], name: str, doc: str
) -> Callable[P, AccuracyResult]:
    """The assert_ form of a measure_ function, named `name`: the same arguments (its
    signature, for help() and type checkers), the result returned, or raised as an
    AssertionError with its description when it fails."""

    @functools.wraps(measure)
    def check(*args: P.args, **kwargs: P.kwargs) -> AccuracyResult:
        result = measure(*args, **kwargs)
        if not result.ok:
            raise AssertionError(result.describe())
        return result

    check.__name__ = name
    check.__qualname__ = measure.__qualname__.removesuffix(measure.__name__) + name
    check.__doc__ = doc
    return check
