"""The web UI test's locustfile: the probe model and the streaming example side by side, both
served by the run's own server (3 probe users to 2 stream users: 10 users on two workers put
3 and 2 on each), with every worker process counting the stream events it fired, on its own,
beside pytest-triton's stream log: when it quits, a worker writes its counts to
$STREAM_COUNTS_DIR/worker-PID.json, so a test can compare what the master merged with the sum
of what its workers sent.

    STREAM_COUNTS_DIR=counts locust -f probe_and_streams.py --processes 2 -u 10 ...
"""

import json
import os
from pathlib import Path
from typing import Any

import locust
from locust.runners import WorkerRunner

import tests.helpers.locustfiles.probe as probe
from pytest_triton.load.stream_users import StreamUser, stream_model

STREAM = stream_model()
COUNTS = {"streams": 0, "failed": 0, "tokens": 0, "checked": 0, "mismatched": 0}


class ProbeUser(probe.ProbeUser):
    weight = 3


class GrpcStreamUser(StreamUser):
    weight = 2
    served = STREAM
    max_tokens = 8


@locust.events.request.add_listener
def count(
    name: str = "",
    response_length: int = 0,
    exception: Exception | None = None,
    context: dict[str, Any] | None = None,
    **_: Any,
) -> None:
    if name != STREAM.spec.name:
        return
    context = context or {}
    COUNTS["failed" if exception is not None else "streams"] += 1
    COUNTS["tokens"] += response_length if exception is None else 0
    COUNTS["checked"] += bool(context.get("stream_checked"))
    COUNTS["mismatched"] += bool(context.get("stream_mismatched"))


@locust.events.quitting.add_listener
def write_counts(environment: Any, **_: Any) -> None:
    directory = os.environ.get("STREAM_COUNTS_DIR")
    if directory and isinstance(environment.runner, WorkerRunner):
        path = Path(directory) / f"worker-{os.getpid()}.json"
        path.write_text(json.dumps(COUNTS))
