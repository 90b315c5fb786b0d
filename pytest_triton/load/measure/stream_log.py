"""Streams measured token by token: time to first token, inter-token latency, end-to-end
latency, output tokens and streams, by one-second slice of wall-clock time, each latency in an
HdrHistogram (microsecond percentiles, latency_histogram.py). No locust import.

The definitions (docs/streams.md sets them beside AIPerf's):
- TTFT: from sending the request to the arrival of its first token's response;
- ITL: each gap between two consecutive tokens' responses of one stream (every gap is one
  value: a percentile of ITL is over gaps, not over per-stream averages as AIPerf's is);
- end to end: from sending the request to its final flag;
- output tokens/s: tokens of the streams that ended in a slice, over the measured span;
- streams/s: the streams that ended with their final flag, over the span;
- goodput: the share of the streams that ended (failed ones too, never good) whose TTFT is
  within the TTFT SLO and whose average inter-token latency ((end to end - TTFT) / (tokens -
  1), AIPerf's per-request ITL) is within the ITL SLO; the user judges each stream (it knows
  the SLOs) and the log counts the good ones.

Counted once (`ended_text`, `checked_text`): every stream that ended is complete (its final
flag after every token, and right where checked) or failed (an error, no final flag, or a
wrong token); of the streams checked token by token, each agreed (a complete one) or
mismatched (a failed one).

Slices are keyed by the second the stream ended in (its final flag), as the window log keys
requests by when they were answered, so a span's figures count the streams that finished in it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_triton.load.measure.latency_histogram import LatencyHistogram

SLICE_S = 1.0
PERCENTS = (50.0, 90.0, 99.0)


@dataclass
class StreamSlice:
    """The streams that ended in one slice (or a span's sum)."""

    ttft: LatencyHistogram = field(default_factory=LatencyHistogram)
    itl: LatencyHistogram = field(default_factory=LatencyHistogram)
    e2e: LatencyHistogram = field(default_factory=LatencyHistogram)
    streams: int = 0
    tokens: int = 0
    failed: int = 0
    good: int = 0
    checked: int = 0  # compared token by token with the reference (--triton-check-every)
    mismatched: int = 0  # of those, streams whose tokens differed (failed, never good)

    def add(self, other: StreamSlice) -> None:
        self.ttft.add(other.ttft)
        self.itl.add(other.itl)
        self.e2e.add(other.e2e)
        self.streams += other.streams
        self.tokens += other.tokens
        self.failed += other.failed
        self.good += other.good
        self.checked += other.checked
        self.mismatched += other.mismatched

    def encode(self) -> dict[str, Any]:
        return {
            "ttft": self.ttft.encode(),
            "itl": self.itl.encode(),
            "e2e": self.e2e.encode(),
            "streams": self.streams,
            "tokens": self.tokens,
            "failed": self.failed,
            "good": self.good,
            "checked": self.checked,
            "mismatched": self.mismatched,
        }

    @classmethod
    def decode(cls, data: Mapping[str, Any]) -> StreamSlice:
        return cls(
            LatencyHistogram.decode(data["ttft"]),
            LatencyHistogram.decode(data["itl"]),
            LatencyHistogram.decode(data["e2e"]),
            int(data["streams"]),
            int(data["tokens"]),
            int(data.get("failed", 0)),
            int(data.get("good", 0)),
            int(data.get("checked", 0)),
            int(data.get("mismatched", 0)),
        )


@dataclass(frozen=True)
class StreamFigures:
    """A span's streaming figures (latencies in ms, NaN where nothing was measured)."""

    streams: int
    tokens: int
    duration_s: float
    ttft_ms: dict[float, float]
    itl_ms: dict[float, float]
    e2e_ms: dict[float, float]
    failed: int = 0
    good: int = 0

    @property
    def goodput(self) -> float:
        """Good streams over every stream that ended (NaN without one)."""
        ended = self.streams + self.failed
        return self.good / ended if ended else math.nan

    @property
    def output_tokens_per_s(self) -> float:
        return self.tokens / self.duration_s if self.duration_s > 0 else math.nan

    @property
    def streams_per_s(self) -> float:
        return self.streams / self.duration_s if self.duration_s > 0 else math.nan

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = {
            "streams": self.streams,
            "output_tokens": self.tokens,
            "duration_s": self.duration_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "streams_per_s": self.streams_per_s,
            "failed_streams": self.failed,
            "good_streams": self.good,
            "goodput": self.goodput,
        }
        for name, values in (("ttft", self.ttft_ms), ("itl", self.itl_ms), ("e2e", self.e2e_ms)):
            out.update({f"{name}_p{p:g}_ms": v for p, v in values.items()})
        return out

    def text(self) -> str:
        def ms(values: dict[float, float]) -> str:
            return ", ".join(f"p{p:g} {v:.3f}" for p, v in values.items())

        failed = f", {self.failed} failed" if self.failed else ""
        return (
            f"Streams: {self.streams} in {self.duration_s:.1f}s ({self.streams_per_s:.2f}/s)"
            f"{failed}, "
            f"{self.tokens} output tokens ({self.output_tokens_per_s:.1f} tokens/s)\n"
            f"  time to first token (ms): {ms(self.ttft_ms)}\n"
            f"  inter-token latency (ms): {ms(self.itl_ms)}\n"
            f"  end to end (ms):          {ms(self.e2e_ms)}"
        )


def ended_text(complete: int, failed: int) -> str:
    """The streams that ended, each counted once: complete or failed."""
    return f"{complete + failed:,} streams ended = {complete:,} complete + {failed:,} failed"


def checked_text(checked: int, mismatched: int) -> str:
    """The streams checked token by token: agreed (complete ones) or mismatched (failed)."""
    return (
        f"{checked:,} checked token by token = {checked - mismatched:,} agreed + "
        f"{mismatched:,} mismatched"
    )


class StreamLog:
    """Every stream of a Locust process (or, on a master, of its workers too) by slice."""

    def __init__(self, slice_s: float = SLICE_S) -> None:
        self.slice_s = slice_s
        self.slices: dict[int, StreamSlice] = {}
        self._unsent: dict[int, StreamSlice] = {}

    def clear(self) -> None:
        self.slices.clear()
        self._unsent.clear()

    def record(
        self,
        ended_at: float,
        ttft_s: float,
        itl_s: Sequence[float],
        e2e_s: float,
        tokens: int,
        good: bool = False,
        checked: bool = False,
    ) -> None:
        """One stream that ended with its final flag at wall-clock `ended_at` (`good`: within
        the run's SLOs; `checked`: its tokens were compared with the reference, and agreed)."""
        key = int(ended_at // self.slice_s)
        for target in (self.slices, self._unsent):
            entry = target.setdefault(key, StreamSlice())
            entry.good += good
            entry.checked += checked
            if math.isfinite(ttft_s):
                entry.ttft.record(ttft_s * 1e3)
            for gap in itl_s:
                entry.itl.record(gap * 1e3)
            if math.isfinite(e2e_s):
                entry.e2e.record(e2e_s * 1e3)
            entry.streams += 1
            entry.tokens += tokens

    def record_failed(
        self, ended_at: float, checked: bool = False, mismatched: bool = False
    ) -> None:
        """One stream that failed (an error, no final flag, a wrong token: `mismatched`, found
        by a check, so `checked` too)."""
        key = int(ended_at // self.slice_s)
        for target in (self.slices, self._unsent):
            entry = target.setdefault(key, StreamSlice())
            entry.failed += 1
            entry.checked += checked or mismatched
            entry.mismatched += mismatched

    # -- workers to master -------------------------------------------------------------------
    def take_unsent(self) -> dict[str, Any]:
        """What was recorded since the last call, encoded for a worker's report."""
        unsent, self._unsent = self._unsent, {}
        return {str(key): entry.encode() for key, entry in unsent.items()}

    def add_sent(self, data: Mapping[str, Any]) -> None:
        """A worker's report (take_unsent's), merged into this log."""
        for key, encoded in data.items():
            self.slices.setdefault(int(key), StreamSlice()).add(StreamSlice.decode(encoded))

    # -- reading -----------------------------------------------------------------------------
    def total(self) -> StreamSlice:
        """Every stream logged since the log started (its counts: the whole run's)."""
        total = StreamSlice()
        for entry in self.slices.values():
            total.add(entry)
        return total

    @property
    def first_at(self) -> float | None:
        """The start of the earliest slice holding a stream (None: no stream yet)."""
        return min(self.slices) * self.slice_s if self.slices else None

    @property
    def last_at(self) -> float | None:
        """The end of the latest slice holding a stream (None: no stream yet)."""
        return (max(self.slices) + 1) * self.slice_s if self.slices else None

    def between(self, first: float, last: float) -> StreamSlice:
        """The streams of the slices wholly between two wall-clock times, added up (every
        slice when the span holds none wholly: a run shorter than its warm-up)."""
        begin = math.ceil(first / self.slice_s - 1e-9)
        end = math.floor(last / self.slice_s + 1e-9)
        total = StreamSlice()
        for key, entry in self.slices.items():
            if begin <= key < end:
                total.add(entry)
        return total

    def figures(self, first: float, last: float) -> StreamFigures | None:
        """The figures of the span (None when no stream ended in it)."""
        span = self.between(first, last)
        if span.streams + span.failed == 0:
            return None
        begin = math.ceil(first / self.slice_s - 1e-9) * self.slice_s
        end = math.floor(last / self.slice_s + 1e-9) * self.slice_s
        return figures_of(span, max(end - begin, 1e-9))


def figures_of(
    span: StreamSlice, duration_s: float, percents: Iterable[float] = PERCENTS
) -> StreamFigures:
    wanted = list(percents)
    return StreamFigures(
        span.streams,
        span.tokens,
        duration_s,
        span.ttft.percentiles_ms(wanted),
        span.itl.percentiles_ms(wanted),
        span.e2e.percentiles_ms(wanted),
        span.failed,
        span.good,
    )
