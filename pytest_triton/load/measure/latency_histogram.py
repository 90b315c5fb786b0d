"""Client latencies as an HdrHistogram: every percentile the project reports or gates on comes
from here (the window log's slices, measurement windows and their merge, the verdict, the live
view, triton-perf and, through their JSON, the gate report). Locust's own statistics stay
Locust's, rounded to whole milliseconds below 100 ms, for its own UI only.

Values are recorded in microseconds from 1 us to one hour with 3 significant digits: a value
is kept within 0.1% (exactly below 2.048 ms), a percentile is the largest value equivalent to
the one holding that share of the counts (HdrHistogram's rule). Histograms add up exactly,
so windows and whole runs are merged from their requests, not averaged from percentiles.

A histogram travels (Locust worker to master, generator to triton-perf, JSON reports) as
HdrHistogram's compressed base64 string (`encode()` / `decode()`), which msgpack and JSON
carry as it is and any HdrHistogram library reads. An HdrHistogram in memory holds its whole
counts array (about 190 kB); `compact()` keeps only the encoded string (tens to hundreds of
bytes) for histograms that are done, such as a run's past time slices. No locust import.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
from hdrh.histogram import HdrHistogram

from pytest_triton.load.measure import hdrh_counts

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3


def _new() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def _record_all(hdr: HdrHistogram, pending: dict[int, int]) -> None:
    """HdrHistogram.record_value for every pending value at once (hdrh_counts says why)."""
    values = np.fromiter(pending.keys(), np.int64, len(pending))
    counts = np.fromiter(pending.values(), np.uint64, len(pending))
    hdrh_counts.record_counts(hdr, values, counts)


def to_us(latency_ms: float) -> int:
    """A latency in ms as the whole microseconds the histogram records (clamped to its range;
    NaN counts as 0)."""
    if not latency_ms > 0:
        return 0
    return min(round(latency_ms * 1e3), HIGHEST_US)


Counts = tuple[list[int], list[int]]
"""Distinct whole-microsecond latencies and how many of each."""


def counts_us(latencies_ms: npt.NDArray[np.float64]) -> Counts:
    """to_us() of each latency, counted by value: what record_counts_us() takes."""
    us = np.where(latencies_ms > 0, np.minimum(np.rint(latencies_ms * 1e3), HIGHEST_US), 0)
    values, counts = np.unique(us.astype(np.int64), return_counts=True)
    return values.tolist(), counts.tolist()


class LatencyHistogram:
    """Latencies of some requests; `count` of them. Record in ms (as Locust's request events
    report them), read percentiles in ms with microsecond resolution.

    Recording only counts microsecond values in a dict (a request costs well under a
    microsecond); they go into the HdrHistogram when it is read, added, encoded or compacted.
    """

    __slots__ = ("_blob", "_hdr", "_pending", "count")

    def __init__(self) -> None:
        self._hdr: HdrHistogram | None = None
        self._blob: str | None = None
        self._pending: dict[int, int] = {}
        self.count = 0

    # -- recording -------------------------------------------------------------------------
    def _live(self) -> HdrHistogram:
        """The HdrHistogram with every count (decoded from the compact form when needed)."""
        if self._hdr is None:
            self._hdr = HdrHistogram.decode(self._blob) if self._blob is not None else _new()
            self._blob = None
        if self._pending:
            _record_all(self._hdr, self._pending)
            self._pending = {}
        return self._hdr

    def record(self, latency_ms: float) -> None:
        self.record_us(to_us(latency_ms))

    def record_us(self, latency_us: int, count: int = 1) -> None:
        """Count a latency already in whole microseconds within range (`to_us`)."""
        pending = self._pending
        pending[latency_us] = pending.get(latency_us, 0) + count
        self.count += count

    def record_counts_us(self, values_us: list[int], counts: list[int]) -> None:
        """record_us(value, count) for each value and its count (counts_us)."""
        pending = self._pending
        for value, count in zip(values_us, counts, strict=True):
            pending[value] = pending.get(value, 0) + count
        self.count += sum(counts)

    def add(self, other: LatencyHistogram) -> None:
        """Add another histogram's counts (exact: both have the same buckets)."""
        if other.count == 0:
            return
        self.count += other.count
        if other._hdr is None and other._blob is None:  # recorded values only
            pending = self._pending
            for value, count in other._pending.items():
                pending[value] = pending.get(value, 0) + count
            return
        decoded = None
        if other._hdr is not None:
            theirs = other._live()
        else:
            theirs = decoded = HdrHistogram.decode(other._blob)
            if other._pending:
                _record_all(decoded, other._pending)
        mine = self._live()
        empty = mine.total_count == 0
        mine.add(theirs)
        if empty:  # HdrHistogram's add takes an empty histogram's minimum as 0
            mine.min_value = theirs.min_value
        if decoded is not None:
            hdrh_counts.release(decoded)

    def compact(self) -> None:
        """Keep only the encoded form until the histogram is read or recorded into again."""
        if self._hdr is not None or self._pending:
            self._blob = self.encode()
            if self._hdr is not None:
                hdrh_counts.release(self._hdr)
            self._hdr = None

    # -- travel ----------------------------------------------------------------------------
    def encode(self) -> str:
        """HdrHistogram's compressed, base64 encoding (V2), as text."""
        if self._hdr is None and not self._pending:
            return self._blob if self._blob is not None else _EMPTY
        encoded: bytes = self._live().encode()
        return encoded.decode("ascii")

    @classmethod
    def decode(cls, text: str | bytes, count: int | None = None) -> LatencyHistogram:
        """A histogram from `encode()`'s text, kept compact until used (`count`, where the
        sender says how many values it holds, saves decoding it to count them)."""
        histogram = cls()
        blob = text.decode("ascii") if isinstance(text, bytes) else str(text)
        if count is None:
            decoded = HdrHistogram.decode(blob)
            count = int(decoded.get_total_count())
            hdrh_counts.release(decoded)
        histogram.count = count
        if count:
            histogram._blob = blob
        return histogram

    @classmethod
    def of(cls, latencies_ms: Iterable[float]) -> LatencyHistogram:
        histogram = cls()
        for value in latencies_ms:
            histogram.record(value)
        return histogram

    # -- reading ---------------------------------------------------------------------------
    def percentiles_ms(self, percents: Sequence[float]) -> dict[float, float]:
        """{percent: latency in ms} (NaN for an empty histogram): the largest latency that
        the histogram cannot tell from the one at that share of the requests."""
        if self.count == 0:
            return {p: math.nan for p in percents}
        hdr = self._live()
        cumulative = np.cumsum(
            hdrh_counts.counts_view(hdr)
        )  # HdrHistogram walks the counts in Python
        values = {}
        for p in percents:
            index = int(np.searchsorted(cumulative, hdr.get_target_count_at_percentile(p)))
            value = hdr.get_value_from_index(min(index, hdr.counts_len - 1))
            values[p] = (
                hdr.get_highest_equivalent_value(value)
                if p
                else hdr.get_lowest_equivalent_value(value)
            )
        return {p: values[p] / 1e3 for p in percents}

    def percentile_ms(self, percent: float) -> float:
        return self.percentiles_ms([percent])[percent]

    def share_within_ms(self, bound_ms: float) -> float:
        """The share of the latencies at or below `bound_ms` (NaN when empty), to the
        histogram's precision: a latency counts when the histogram cannot tell it from one
        within the bound (so a latency of exactly the bound is within it)."""
        if self.count == 0:
            return math.nan
        hdr = self._live()
        # the values the histogram keeps at or below the bound's own index are the ones it
        # cannot tell from a value within the bound
        (last,) = hdrh_counts.indices(_TEMPLATE, np.array([to_us(bound_ms)], np.int64))
        within = int(hdrh_counts.counts_view(hdr)[: int(last) + 1].sum())
        return float(within) / self.count

    def equivalent_range_ms(self, latency_ms: float) -> tuple[float, float]:
        """The latencies (ms) the histogram keeps as the same value as this one: what a
        percentile read from it is exact to."""
        us = to_us(latency_ms)
        low = _TEMPLATE.get_lowest_equivalent_value(us)
        high = _TEMPLATE.get_highest_equivalent_value(us)
        return low / 1e3, high / 1e3

    def __repr__(self) -> str:
        if not self.count:
            return "LatencyHistogram(empty)"
        p = self.percentiles_ms([50, 99])
        return f"LatencyHistogram(count={self.count}, p50={p[50]:.3f} ms, p99={p[99]:.3f} ms)"


_TEMPLATE = _new()  # bucket arithmetic only; never recorded into
_EMPTY: str = _TEMPLATE.encode().decode("ascii")


def ms_text(value: float | None) -> str:
    """A latency in ms with the digits the histogram has: '2.14', '0.213', '25.3', '1,250'."""
    if value is None or math.isnan(value):
        return "n/a"
    if abs(value) >= 99.95:
        return f"{value:,.0f}"
    return f"{value:#.3g}" if value else "0"
