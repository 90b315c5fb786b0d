"""Setting values from text: one parser per type, each raising ValueError that says what it
expected (the settings table turns it into a ConfigError naming where the text came from)."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from pytest_triton.base.formats import CPU_FORMATS, GPU_FORMATS, PRECISIONS
from pytest_triton.base.security import parse_header


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.replace("\n", ",").split(",") if p.strip())


def _choices(
    text: str, allowed: Iterable[str], refusal: Callable[[list[str]], str], *, dedupe: bool = True
) -> tuple[str, ...]:
    """A non-empty comma list of allowed values; `refusal(unknown ones)` says what went wrong."""
    items = parse_list(text)
    allowed = tuple(allowed)
    bad = [i for i in items if i not in allowed]
    if bad or not items:
        raise ValueError(refusal(bad))
    return tuple(dict.fromkeys(items)) if dedupe else items


def parse_protocols(text: str) -> tuple[str, ...]:
    if parse_list(text) == ("both",):
        return ("http", "grpc")
    return _choices(text, ("http", "grpc"), lambda _: f"expected http, grpc or both, got {text!r}")


SHARED_MEMORY = ("none", "system", "cuda")


def parse_shared_memory(text: str) -> tuple[str, ...]:
    return _choices(
        text,
        SHARED_MEMORY,
        lambda _: f"expected none, system or cuda (a comma list for pytest), got {text!r}",
    )


def parse_formats(text: str) -> tuple[str, ...]:
    known = CPU_FORMATS + GPU_FORMATS
    return _choices(
        text,
        known,
        lambda bad: f"unknown format(s) {bad or text!r}; choose from {', '.join(known)}",
        dedupe=False,
    )


def parse_precisions(text: str) -> tuple[str, ...]:
    return _choices(
        text,
        PRECISIONS,
        lambda bad: f"unknown precision(s) {bad or text!r}; choose from {', '.join(PRECISIONS)}",
    )


def parse_gpus(text: str) -> str:
    """all, or a comma list of GPU ordinals, normalized ("0, 1" -> "0,1")."""
    value = text.strip().lower()
    if value == "all":
        return value
    items = parse_list(value)
    if not items or not all(i.isdigit() for i in items):
        raise ValueError(f"expected all or a comma list of GPU ordinals (0,1), got {text!r}")
    return ",".join(dict.fromkeys(str(int(i)) for i in items))


def parse_format(text: str) -> str | None:
    """One format a CPU server can serve (the embedded server of a load test)."""
    value = text.strip()
    if value and value not in CPU_FORMATS:
        raise ValueError(
            f"export format {value!r} cannot be served on CPU; choose from {', '.join(CPU_FORMATS)}"
        )
    return value or None


def _positive(text: str, expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected {expected} > 0, got {text!r}") from None
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"expected {expected} > 0, got {text!r}")
    return value


def parse_positive_number(text: str) -> float:
    return _positive(text, "a number")


DurationUnit = Literal["ms", "s"]
MICROSECONDS_IN: dict[str, int] = {
    "us": 1,
    "µs": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "min": 60_000_000,
    "h": 3_600_000_000,
}
"""The units a duration may be written in (Locust's -t spells minutes and hours m and h)."""
_DURATION = re.compile(r"\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([a-zµ]*)\s*")


@dataclass(frozen=True)
class Duration:
    """A duration setting's parser: a bare number is in `unit` (the setting's unit, as it
    always was); `500ms`, `5s`, `2m` say theirs and are converted to it (in decimal, so that
    `0.3s` is 300 ms exactly)."""

    unit: DurationUnit
    zero: bool = False  # whether 0 is allowed (a warm-up, a target) or it must be > 0

    def __call__(self, text: str) -> float:
        found = _DURATION.fullmatch(text)
        given = (found.group(2) or self.unit) if found else ""
        if found is None or given not in MICROSECONDS_IN:
            raise ValueError(self.refusal(text))
        value = float(Decimal(found.group(1)) * MICROSECONDS_IN[given] / MICROSECONDS_IN[self.unit])
        if not math.isfinite(value) or (value == 0 and not self.zero):
            raise ValueError(self.refusal(text))
        return value

    @property
    def examples(self) -> str:
        return "500ms, 5s" if self.unit == "ms" else "30s, 2m"

    def refusal(self, text: str) -> str:
        return (
            f"expected a number {'>=' if self.zero else '>'} 0, got {text!r} (a duration: a "
            f"bare number is in {self.unit}, or give its unit: {self.examples})"
        )


def _integer_from(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected an integer >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise ValueError(f"expected an integer >= {minimum}, got {text!r}")
    return value


def parse_positive_int(text: str) -> int:
    return _integer_from(text, 1)


def parse_count(text: str) -> int:
    return _integer_from(text, 0)


def parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def parse_limit(text: str) -> float:
    """A target's limit: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a number >= 0, got {text!r}")
    return value


def parse_ratio(text: str) -> float:
    value = parse_limit(text)
    if value > 1:
        raise ValueError(f"expected a ratio in 0..1, got {text!r}")
    return value


def parse_numbers(text: str) -> tuple[float, ...]:
    """A non-empty comma list of numbers > 0 (a shape's stages: users, or req/s)."""
    items = parse_list(text)
    if not items:
        raise ValueError(f"expected a comma list of numbers > 0, got {text!r}")
    return tuple(_positive(i, "comma-separated numbers") for i in items)


def parse_optional(text: str) -> str | None:
    return text.strip() or None


MAX_SEQUENCE_ID = 2**63 - 1
"""The largest CORRID a range without an end reaches (Triton's UINT64 ids, kept signed)."""


def parse_id_range(text: str) -> tuple[int, int]:
    """perf_analyzer's --sequence-id-range START[:END]: ids from START up to END (excluded),
    START >= 1 (id 0 is no sequence); without END, unbounded."""
    parts = text.strip().split(":")
    try:
        if len(parts) > 2:
            raise ValueError
        start = int(parts[0])
        end = int(parts[1]) if len(parts) == 2 and parts[1].strip() else MAX_SEQUENCE_ID
    except ValueError:
        raise ValueError(f"expected START[:END] sequence ids (e.g. 1:1000), got {text!r}") from None
    if start < 1 or end <= start:
        raise ValueError(
            f"expected sequence ids START[:END] with 1 <= START < END (id 0 is no sequence), "
            f"got {text!r}"
        )
    return (start, end)


def parse_headers(text: str) -> tuple[str, ...]:
    """';'-separated 'Name: value' headers, each checked for its form (values stay as written)."""
    headers = tuple(h.strip() for h in text.split(";") if h.strip())
    for header in headers:
        parse_header(header)
    return headers


def parse_shell_words(text: str) -> tuple[str, ...]:
    return tuple(shlex.split(text))
