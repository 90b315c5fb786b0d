"""hdrh (HdrHistogram's Python port): values recorded into its counts array directly.

`HdrHistogram.record_value` runs Python code per value; a window slice flushes a quarter
second of requests, thousands of distinct microsecond values, and that was the Locust
process's largest cost after the kernel's. Relied on: `counts` (a ctypes array numpy can
view), `counts_len`, `total_count`, `min_value`, `max_value`, the bucket layout attributes
(`sub_bucket_mask`, `unit_magnitude`, `sub_bucket_half_count_magnitude`,
`sub_bucket_half_count`) and `encoder` (which refers back to the histogram).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hdrh.histogram import HdrHistogram


def release(hdr: HdrHistogram) -> None:
    """Drop a histogram we are done with at once: an HdrHistogram and its encoder refer to
    each other, so without this its 190 kB wait for Python's cyclic garbage collector."""
    hdr.encoder = None


def counts_view(hdr: HdrHistogram) -> npt.NDArray[np.uint64]:
    """The histogram's counts array as numpy sees it (the same memory, no copy)."""
    counts: npt.NDArray[np.uint64] = np.ctypeslib.as_array(hdr.counts)
    return counts


def indices(layout: HdrHistogram, values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Each value's index in the counts array of histograms shaped like `layout`, all at
    once: its bucket (from the bit length of the value with the sub-bucket mask set) and
    its sub-bucket within it."""
    t = layout
    bits = np.frexp((values | t.sub_bucket_mask).astype(np.float64))[1]  # exact below 2**53
    bucket = bits - t.unit_magnitude - (t.sub_bucket_half_count_magnitude + 1)
    sub = values >> (bucket + t.unit_magnitude)
    base = (bucket + 1) << t.sub_bucket_half_count_magnitude
    index: npt.NDArray[np.int64] = base + (sub - t.sub_bucket_half_count)
    return index


def record_counts(
    hdr: HdrHistogram, values: npt.NDArray[np.int64], counts: npt.NDArray[np.uint64]
) -> None:
    """HdrHistogram.record_value(value, count) for every pair at once; values outside the
    histogram's range are dropped, as record_value drops them."""
    index = indices(hdr, values)
    kept = (values >= 0) & (index >= 0) & (index < hdr.counts_len)
    np.add.at(counts_view(hdr), index[kept], counts[kept])
    if kept.any():
        hdr.total_count += int(counts[kept].sum())
        hdr.min_value = min(hdr.min_value, int(values[kept].min()))
        hdr.max_value = max(hdr.max_value, int(values[kept].max()))
