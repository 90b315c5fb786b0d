"""The Python a Locust user spends per request, without the kernel: a benchmark, not a test.

loadgen_vs_wrk.py measures a generator's whole CPU per request (Python, kernel, the machine's
contention); this one times the Python alone, in one process, in a loop: the multiplexer's
turn for one answer (read it, send the next request, report it) on lanes whose sockets replay
an answer recorded from the trivial model's server (loadgen_vs_wrk.py's), with no syscall;
and Locust's request event with pytest-triton's listeners on it (Locust's statistics, the
window log), or the same entered in bulk, as a multiplexed user's successful answers are.
CPU time (time.process_time) per request, the best of 3 repeats of N.

    python benchmarks/generator_python_cost.py              # N = 20000
    python benchmarks/generator_python_cost.py -n 50000
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import locust  # noqa: F401  (gevent's patching first, as in a Locust process)
import numpy as np
from loadgen_vs_wrk import MODEL, write_trivial
from locust import User
from locust.env import Environment
from locust.event import Events

from pytest_triton.client.triton_client import TritonClient
from pytest_triton.load.runner import multiplexer, recording
from pytest_triton.load.runner.bulk_requests import bulk_requests
from pytest_triton.server import LocalLauncher, ServerArgs

LANES = 8


class _Recorded:
    """A lane's socket once warm: sends go nowhere, receives return the answer recorded."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.answer = b""

    def send(self, data: bytes, *_: Any) -> int:
        return len(data)

    def sendall(self, data: bytes, *_: Any) -> None:
        return None

    def recv_into(self, buffer: Any, *_: Any) -> int:
        buffer[: len(self.answer)] = self.answer
        return len(self.answer)

    def fileno(self) -> int:
        return int(self.real.fileno())

    def close(self) -> None:
        self.real.close()


class _Tap(_Recorded):
    def recv_into(self, buffer: Any, *_: Any) -> int:
        n = int(self.real.recv_into(buffer))
        self.answer += bytes(buffer[:n])
        return n

    def send(self, data: bytes, *_: Any) -> int:
        return int(self.real.send(data))

    def sendall(self, data: bytes, *_: Any) -> None:
        self.real.sendall(data)


class _User(User):
    abstract = False


def per_request(step: Callable[[], None], n: int) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(n):
            step()
        best = min(best, (time.process_time() - start) / n * 1e6)
    return best


Report = Callable[[float, int], None]


def lane_turns(url: str, protocol: str, report: Report | None, n: int) -> float:
    """µs of Python per answer handled by the multiplexer (and reported, with `report`)."""

    def record(latency_s: float, size: int, error: Exception | None, _: Any) -> None:
        if report is not None:
            report(latency_s * 1e3, size)

    driver = multiplexer.Multiplexer()
    slots = []
    for user in range(LANES):
        client = TritonClient(url, protocol, timeout_s=30)  # type: ignore[arg-type]
        batches = [{"X": np.full((1, 4), user + i, dtype=np.float32)} for i in range(4)]
        requests: Iterator[Any] = itertools.cycle(client.prepare_all(MODEL, batches))
        lane = client.lane()
        assert lane is not None
        for _ in range(3):  # the connection's set-up done, one answer recorded
            lane.send(next(requests))
            while lane.readable() is None:
                pass
        connection: Any = lane._connection
        connection.sock = tap = _Tap(connection.sock)
        lane.send(next(requests))
        while lane.readable() is None:
            pass
        replay = _Recorded(tap.real)
        replay.answer = tap.answer
        connection.sock = replay
        stream = getattr(connection, "stream", None)  # gRPC: the recorded answer's stream
        slot = multiplexer._Slot(lane, requests, record, 30.0)
        driver._slots.append(slot)
        driver._send(slot)
        slots.append((slot, connection, stream))
    turn = itertools.cycle(slots)
    done: list[Any] = []

    def step() -> None:
        slot, connection, stream = next(turn)
        if stream is not None:  # the request in flight is on the recorded answer's stream
            connection.stream = connection.next_stream = stream
        driver._readable(slot, done)
        for s, latency_s, size, error, answer in done:
            s.record(latency_s, size, error, answer)
        done.clear()

    return per_request(step, n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20000, help="requests per repeat")
    args = parser.parse_args()
    environment = Environment(user_classes=[_User], events=Events())
    recording.attach_window_log(environment)
    environment.create_local_runner()
    fire = environment.events.request.fire
    context = {"batch_size": 1, "protocol": "http"}
    bulk = bulk_requests(environment)
    assert bulk is not None

    def event(latency_ms: float, size: int) -> None:
        fire(
            request_type="http",
            name=MODEL,
            response_time=latency_ms,
            response_length=size,
            exception=None,
            context=context,
        )

    def in_bulk(latency_ms: float, size: int) -> None:
        bulk.add("http", MODEL, context, latency_ms, size)

    rows = [
        (
            "Locust's request event (its statistics, the window log)",
            per_request(
                lambda: fire(
                    request_type="http",
                    name=MODEL,
                    response_time=1.234,
                    response_length=120,
                    exception=None,
                    context=context,
                ),
                args.n,
            ),
        ),
        (
            "the same, in bulk (bulk_requests.py)",
            per_request(lambda: in_bulk(1.234, 120), args.n),
        ),
    ]
    workdir = Path(tempfile.mkdtemp(prefix="pytest-triton-pycost-"))
    try:
        write_trivial(workdir / "repo")
        with LocalLauncher().start(
            ServerArgs(workdir / "repo", model_control_mode="none", startup_timeout_s=60)
        ) as server:
            for protocol in ("http", "grpc"):
                url = server.endpoints.url(protocol)
                rows.append(
                    (f"{protocol}: multiplexer + lane", lane_turns(url, protocol, None, args.n))
                )
                rows.append((f"{protocol}: + the event", lane_turns(url, protocol, event, args.n)))
                rows.append((f"{protocol}: + in bulk", lane_turns(url, protocol, in_bulk, args.n)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nPython per request, best of 3 x {args.n:,} (µs of CPU, no syscalls)\n")
    print("| path | µs |\n|---|---|")
    for label, us in rows:
        print(f"| {label} | {us:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
