"""Goodput: the share of a run's requests answered successfully within a latency SLO
(`--perf-goodput 0.99 --perf-slo-ms 20`), from the request log's latency histograms.

The share comes from the requests' HdrHistogram (latency_histogram.py), to its precision
(0.1%). A failed request is never good: failures are subtracted from the requests within the
SLO (their latencies are in the histogram too). No locust import.
"""

from __future__ import annotations

import math

from pytest_triton.load.measure.latency_histogram import LatencyHistogram
from pytest_triton.load.measure.window_log import Slice, WindowLog


def share_within(histogram: LatencyHistogram, slo_ms: float) -> float:
    """The share of a histogram's latencies at or below `slo_ms` (NaN when it is empty)."""
    return histogram.share_within_ms(slo_ms)


def goodput_of(requests: Slice, slo_ms: float) -> float:
    """Successful requests within the SLO over all requests (NaN without requests)."""
    if requests.requests == 0:
        return math.nan
    within = share_within(requests.histogram, slo_ms) * requests.requests
    return max(0.0, within - requests.failures) / requests.requests


def requests_between(log: WindowLog, first: float, last: float, name: str | None = None) -> Slice:
    """The requests of the slices wholly between two wall-clock times, added up."""
    total = Slice()
    begin = math.ceil(first / log.slice_s - 1e-9)
    end = math.floor(last / log.slice_s + 1e-9)
    for key, by_name in log.slices.items():
        if begin <= key < end:
            for n, entry in by_name.items():
                if name is None or n == name:
                    total.add(entry)
    return total


def goodput_between(log: WindowLog, first: float, last: float, slo_ms: float) -> float:
    return goodput_of(requests_between(log, first, last), slo_ms)
