"""What load/runner/locust_stats.py relies on in Locust, read in a process of its own
(importing locust patches gevent in), printed as JSON for test_compat_contracts.py.

    python -m tests.helpers.locust_contract_probe
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
from typing import Any  # noqa: E402

import locust.stats  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.event import Events  # noqa: E402
from locust.stats import RequestStats, StatsEntry  # noqa: E402

from pytest_triton.load.runner import locust_stats  # noqa: E402

# Three seconds of requests: (completion time, latency ms, bytes)
REQUESTS = [(100.2, 3.0, 10), (100.7, 250.0, 20), (101.1, 7.5, 5), (103.9, 1234.0, 1)]


def figures(entry: StatsEntry) -> dict[str, Any]:
    return {
        "num_requests": entry.num_requests,
        "per second": sorted(entry.num_reqs_per_sec.items()),
        "last": entry.last_request_timestamp,
        "total": entry.total_response_time,
        "min": entry.min_response_time,
        "max": entry.max_response_time,
        "times": sorted(entry.response_times.items()),
        "bytes": entry.total_content_length,
        "cached": sorted(  # the seconds of REQUESTS (not the one each entry was made in)
            (k, sorted(v.response_times.items()))
            for k, v in entry.response_times_cache.items()
            if k < 1_000
        ),
    }


def entries() -> tuple[StatsEntry, StatsEntry]:
    stats = RequestStats(use_response_times_cache=True)
    return stats.get("m", "POST"), stats.get("n", "POST")


def main() -> None:
    env = Environment(user_classes=[], events=Events())
    env.create_local_runner()
    listeners = locust_stats.request_listeners(env)
    by_log, in_bulk = entries()
    clock = locust.stats.time.time
    try:
        for at, latency, size in REQUESTS:
            locust.stats.time.time = lambda at=at: at  # log() reads the clock for its second
            by_log.log(latency, size)
    finally:
        locust.stats.time.time = clock
    for at, latency, size in REQUESTS:
        bucket = locust.stats.bucket_response_time(latency)
        locust_stats.enter_second(in_bulk, at, 1, latency, latency, latency, {bucket: 1}, size)
    print(
        json.dumps(
            {
                "statistics listeners": sum(map(locust_stats.is_statistics_listener, listeners)),
                "listeners": len(listeners),
                "by log": figures(by_log),
                "in bulk": figures(in_bulk),
            }
        )
    )


if __name__ == "__main__":
    main()
