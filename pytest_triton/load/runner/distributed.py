"""What crosses between a Locust master and its workers besides Locust's own messages: the
master's clock, and a worker's refusal to load.

Windows are cut on the master's clock. Each worker logs its requests by completion time, so a
worker whose clock is off by seconds would put its requests into other windows (or outside
the run). Workers therefore measure their offset to the master's clock as NTP does: a ping
carries the worker's send time, the master answers with its own time, and the round trip
with the shortest delay gives the offset (error at most half that round trip). Workers ping
when they connect and with every statistics report, and log requests on the master's clock.

A worker that refuses the run's settings (say, an embedded server on the master's loopback,
out of its reach) tells the master, which ends the run with that reason instead of waiting
for load that never comes.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from pytest_triton.load.runner.recording import window_log
from pytest_triton.load.runner.run_state import StateKey, run_state

log = logging.getLogger("pytest_triton.load")
PING = "pytest_triton_clock_ping"
PONG = "pytest_triton_clock_pong"
REFUSED = "pytest_triton_refused"
OFFSET_REPORT_KEY = "pytest_triton_clock_offset"
OFFSETS = StateKey[dict[str, dict[str, float]]]("worker clock offsets")
PINGS_AT_CONNECT = 5


@dataclass
class MasterClock:
    """A worker's view of the master's wall clock: time.time() plus the measured offset."""

    offset_s: float = 0.0
    round_trip_s: float = math.inf
    samples: int = field(default=0)

    def now(self) -> float:
        return time.time() + self.offset_s

    def ping_data(self) -> dict[str, float]:
        return {"sent": time.time()}

    def on_pong(self, sent: float, master: float, received: float | None = None) -> None:
        """One round trip: keep it when its delay is the shortest yet."""
        received = time.time() if received is None else received
        round_trip = received - sent
        self.samples += 1
        if 0 <= round_trip < self.round_trip_s:
            self.round_trip_s = round_trip
            self.offset_s = master - (sent + received) / 2


def worker_offsets(environment: Environment) -> dict[str, dict[str, float]]:
    """On the master: each worker's last reported clock offset and its round trip (s)."""
    offsets = run_state(environment).get(OFFSETS) or {}
    return offsets


def install_distributed(environment: Environment) -> None:
    """Wire the messages for this process's role (nothing for a local runner)."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        _install_worker(environment, runner)
    elif isinstance(runner, MasterRunner):
        _install_master(environment, runner)


def _install_worker(environment: Environment, runner: WorkerRunner) -> None:
    clock = MasterClock()  # kept by the window log's clock and the pong listener
    requests = window_log(environment)
    if requests is not None:
        requests.clock = clock.now

    def on_pong(environment: Environment, msg: Any, **_: Any) -> None:
        clock.on_pong(float(msg.data["sent"]), float(msg.data["master"]))

    def on_report(data: dict[str, Any], **_: Any) -> None:
        runner.send_message(PING, clock.ping_data())
        data[OFFSET_REPORT_KEY] = [clock.offset_s, clock.round_trip_s]

    def ping_a_few() -> None:
        for _ in range(PINGS_AT_CONNECT):
            runner.send_message(PING, clock.ping_data())
            gevent.sleep(0.05)

    runner.register_message(PONG, on_pong)
    environment.events.report_to_master.add_listener(on_report)
    gevent.spawn(ping_a_few)


def _install_master(environment: Environment, runner: MasterRunner) -> None:
    offsets: dict[str, dict[str, float]] = {}
    run_state(environment)[OFFSETS] = offsets

    def on_ping(environment: Environment, msg: Any, **_: Any) -> None:
        runner.send_message(
            PONG, {"sent": msg.data["sent"], "master": time.time()}, client_id=msg.node_id
        )

    def on_refused(environment: Environment, msg: Any, **_: Any) -> None:
        log.error("pytest-triton: worker %s refused the run: %s", msg.node_id, msg.data["reason"])
        environment.process_exit_code = 2
        gevent.spawn(runner.quit)  # not from this greenlet, which quit() kills

    def on_worker_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
        reported = data.get(OFFSET_REPORT_KEY)
        if reported:
            offsets[client_id] = {"offset_s": reported[0], "round_trip_s": reported[1]}

    runner.register_message(PING, on_ping)
    runner.register_message(REFUSED, on_refused)
    environment.events.worker_report.add_listener(on_worker_report)


def tell_master_refused(environment: Environment, reason: str) -> None:
    """On a worker: the master ends the run with this reason (elsewhere: nothing to tell)."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.send_message(REFUSED, {"reason": reason})
