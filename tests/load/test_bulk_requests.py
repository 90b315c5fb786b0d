"""Requests entered in bulk give Locust's statistics and the window log exactly what one
request event each gives (load/runner/bulk_requests.py); another listener still hears every
request. The feeding runs in tests/helpers/bulk_probe.py (locust patches gevent in)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.locust_runs import probe_report

pytestmark = pytest.mark.load
CONTEXT = {"batch_size": 4, "protocol": "http"}  # bulk_probe.py's (importing it patches gevent)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return probe_report("tests.helpers.bulk_probe")


def test_bulk_entry_gives_what_one_event_per_request_gives(report: dict[str, Any]) -> None:
    expected = report["by event"]
    assert len([k for k in expected if k.startswith("slice")]) >= 9  # slices crossed
    assert len(expected["total"]["per second"]) == 4  # seconds crossed
    assert len(expected["total"]["cached seconds"]) >= 3
    assert report["in bulk"] == expected


def test_another_listener_hears_every_request_as_an_event(report: dict[str, Any]) -> None:
    found = report["another listener"]
    assert not found["bulk for a later user"], "a user made after it fires events one by one"
    assert found["heard"] == [["m", 1.5, CONTEXT], ["m", 2.5, CONTEXT]]
    assert found["counted"] == 3


def test_requests_kept_across_a_statistics_reset_belong_to_before_it(
    report: dict[str, Any],
) -> None:
    assert report["reset"] == [0, 1]


def test_locusts_buckets_are_counted_at_once_as_its_function_counts_them(
    report: dict[str, Any],
) -> None:
    """Every band of locust.stats.bucket_response_time, half-way points included; a
    locustfile that replaces the function gets its own buckets."""
    assert report["buckets"] == {"as Locust's": True, "as a replacement's": True}
