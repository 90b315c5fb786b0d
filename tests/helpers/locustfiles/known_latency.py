"""Request events with known response times and no server: what a master measures from its
workers is then known exactly. Each user fires PER_USER events (helpers/known_latencies.py)
of BASE_US, BASE_US + STEP_US, ... microseconds (KNOWN_LATENCY_BASE_US / KNOWN_LATENCY_STEP_US:
set per worker), one a millisecond, then idles until the run ends.

    locust -f known_latency.py --host http://127.0.0.1:PORT ...  # nothing listens there
"""

import os

import gevent
from locust import User, constant, task

import pytest_triton.load.users  # noqa: F401  (pytest-triton's listeners)
from tests.helpers.known_latencies import latencies_us

BASE_US = int(os.environ.get("KNOWN_LATENCY_BASE_US", "1000"))
STEP_US = int(os.environ.get("KNOWN_LATENCY_STEP_US", "1"))


class KnownLatencyUser(User):
    model = "known"  # the name the run's statistics tracker asks the (absent) server about
    wait_time = constant(0)

    def on_start(self) -> None:
        self.todo = latencies_us(BASE_US, STEP_US)

    @task
    def fire(self) -> None:
        if not self.todo:
            gevent.sleep(3600)  # done: the run's end stops it
            return
        self.environment.events.request.fire(
            request_type="KNOWN",
            name="known",
            response_time=self.todo.pop(0) / 1000,
            response_length=0,
            exception=None,
            context={"batch_size": 1},
        )
        gevent.sleep(0.001)
