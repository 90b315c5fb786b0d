"""The private parts of libraries the load engine relies on (docs/architecture.md lists them),
checked against the libraries' public behaviour: an upgrade that changes them fails here,
loudly, instead of skewing a load run's figures."""

from __future__ import annotations

import socket
from typing import Any

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from pytest_triton.base.security import PLAIN
from pytest_triton.client.wire.raw_socket import raw_socket
from pytest_triton.load.measure import hdrh_counts
from tests.helpers.locust_runs import probe_report


def _histogram() -> HdrHistogram:
    return HdrHistogram(1, 3_600_000_000, 3)


def test_hdrh_counts_recorded_at_once_equal_record_value_for_each() -> None:
    rng = np.random.default_rng(5)
    values = np.concatenate(
        [rng.integers(1, 5_000_000, 2_000), [1, 2047, 2048, 3_600_000_000, 7_200_000_000]]
    ).astype(np.int64)
    counts = rng.integers(1, 4, len(values)).astype(np.uint64)
    one_by_one, at_once = _histogram(), _histogram()
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        if value <= 3_600_000_000 * 2:  # record_value refuses what lies past the range
            one_by_one.record_value(value, count)
    hdrh_counts.record_counts(at_once, values, counts)
    assert at_once.encode() == one_by_one.encode()
    assert (at_once.total_count, at_once.min_value, at_once.max_value) == (
        one_by_one.total_count,
        one_by_one.min_value,
        one_by_one.max_value,
    )
    assert at_once.get_value_at_percentile(99) == one_by_one.get_value_at_percentile(99)


def test_hdrh_release_breaks_the_histogram_encoder_cycle() -> None:
    """A released histogram is done with (its counts live on in an encoded copy): nothing but
    the cycle must keep it, so it goes at once without the collector."""
    import gc
    import weakref

    hdr = _histogram()
    hdr.record_value(1234)
    assert hdr.encoder.histogram is hdr  # the cycle release() breaks
    gone = weakref.ref(hdr)
    hdrh_counts.release(hdr)
    gc.disable()
    try:
        del hdr
        assert gone() is None
    finally:
        gc.enable()


@pytest.fixture(scope="module")
def locust_contract() -> dict[str, Any]:
    return probe_report("tests.helpers.locust_contract_probe")


def test_locusts_statistics_listener_is_recognised(locust_contract: dict[str, Any]) -> None:
    """Without it the bulk entry silently turns itself off (every request an event)."""
    assert locust_contract["statistics listeners"] == 1 == locust_contract["listeners"]


def test_a_second_entered_at_once_equals_stats_entry_log(locust_contract: dict[str, Any]) -> None:
    assert locust_contract["in bulk"] == locust_contract["by log"]
    assert locust_contract["by log"]["cached"], "seconds crossed: Locust's cache was used"


def test_gevents_socket_wraps_the_operating_systems() -> None:
    from gevent import socket as gevent_socket

    left, right = gevent_socket.socketpair()
    try:
        raw = raw_socket(left, PLAIN)
        # gevent's wrapper holds the operating system's socket under `_sock` (its own
        # subclass of the C socket type, which allows weak references)
        assert isinstance(raw, socket.SocketType) and raw is not left and raw is left._sock
        assert raw.fileno() == left.fileno()
        raw.send(b"ping")
        assert right.recv(4) == b"ping"
    finally:
        left.close()
        right.close()
