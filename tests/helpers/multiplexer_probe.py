"""Drives the load multiplexer against a real server, in a process of its own (gevent's monkey
patching must not reach pytest's), and prints what test_multiplexer.py checks, as JSON.

    python -m tests.helpers.multiplexer_probe HTTP_HOSTPORT GRPC_HOSTPORT
    python -m tests.helpers.multiplexer_probe --death GRPC_HOSTPORT   # the test kills the server
"""

from gevent import monkey

monkey.patch_all()

import collections  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402

from pytest_triton.client.triton_client import PreparedRequest, Protocol, TritonClient  # noqa: E402
from pytest_triton.load.runner.multiplexer import multiplexer, pump_available  # noqa: E402

MODEL = "sleepy"  # tests/helpers/probe_models.py: x FP32 [8] -> y FP32 [4], 20 ms a request
GOOD = {"x": np.ones((1, 8), np.float32)}
BAD = {"x": np.ones((1, 3), np.float32)}  # Triton rejects the shape
LARGE_MODEL = "roomy"  # the same model with room for large batches (test_multiplexer.py)
# 67,200 bytes of x: over HTTP/2's initial 64 KiB windows, as a DLRM batch of 256 (67 kB)
LARGE = {"x": np.ones((2100, 8), np.float32)}
RUN = types.SimpleNamespace()  # what holds the run's multiplexer (Locust's Environment does)


def connections_to(hostport: str) -> int:
    port = int(hostport.rsplit(":", 1)[1])
    return sum(
        1
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def drive(
    hostport: str,
    protocol: Protocol,
    batches: list[dict[str, np.ndarray]],
    lanes: int,
    seconds: float,
    timeout_s: float,
    shared: bool = False,
    pump: bool = True,
    model: str = MODEL,
) -> dict[str, Any]:
    """`lanes` users, each cycling through `batches`, for `seconds`; then stopped as Locust
    stops users (their greenlets killed). `shared`: gRPC streams on one connection.
    `pump=False`: HTTP answers read in Python even where the C pump is built."""
    driver = multiplexer(RUN)
    driver.use_pump = pump and pump_available()
    pumped_before = driver.pumped
    outcomes: collections.Counter[str] = collections.Counter()
    sizes: set[int] = set()

    def record(latency_s: float, size: int, error: Exception | None, answer: Any) -> None:
        assert latency_s >= 0
        if error is None:
            outcomes["ok"] += 1
            sizes.add(size)
        else:
            outcomes[f"{type(error).__name__}: {error}"[:300]] += 1

    clients = [TritonClient(hostport, protocol, timeout_s=timeout_s) for _ in range(lanes)]
    users = []
    opened = [0]  # connections the lanes opened

    def counting(send: Callable[[PreparedRequest], bool]) -> Callable[[PreparedRequest], bool]:
        def counted(request: PreparedRequest) -> bool:
            fresh = send(request)
            opened[0] += fresh
            return fresh

        return counted

    for client in clients:
        lane = client.lane(shared=shared)
        assert lane is not None, f"no lane over {protocol}"
        lane.send = counting(lane.send)  # type: ignore[assignment]
        requests = client.prepare_all(model, batches, ["y"])
        users.append(
            gevent.spawn(multiplexer(RUN).serve, lane, itertools.cycle(requests), record, timeout_s)
        )
    gaps: list[float] = []

    def tick() -> None:  # another greenlet of the process: does the hub still turn?
        last = time.perf_counter()
        while True:
            gevent.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = gevent.spawn(tick)
    gevent.sleep(seconds / 2)
    during = connections_to(hostport)
    gevent.sleep(seconds / 2)
    gevent.killall(users)
    ticker.kill()
    gevent.sleep(0.05)  # the driver sees no lane left and ends
    for client in clients:
        client.close()
    return {
        "outcomes": dict(outcomes),
        "sizes": sorted(sizes),
        "connections_during": during,
        "connections_opened": opened[0],
        "connections_after": connections_to(hostport),
        "lanes_after": multiplexer(RUN).lanes,
        "pumped": driver.pumped - pumped_before,
        "max_tick_gap_s": max(gaps) if gaps else None,
        "ticks": len(gaps),
    }


def through_a_death(grpc: str, lanes: int = 4) -> dict[str, Any]:
    """`lanes` users' streams on one shared connection while the test kills the server
    (it does so once this prints "loading"): when each user's first failure came."""
    failed_at: dict[int, float] = {}
    errors: collections.Counter[str] = collections.Counter()

    def recorder(user: int) -> Callable[[float, int, Exception | None, Any], None]:
        def record(latency_s: float, size: int, error: Exception | None, answer: Any) -> None:
            if error is not None:
                failed_at.setdefault(user, time.monotonic())
                errors[type(error).__name__] += 1

        return record

    users = []
    for user in range(lanes):
        client = TritonClient(grpc, "grpc", timeout_s=30)
        lane = client.lane(shared=True)
        assert lane is not None
        requests = itertools.cycle(client.prepare_all(MODEL, [GOOD], ["y"]))
        record = recorder(user)
        users.append(gevent.spawn(multiplexer(RUN).serve, lane, requests, record, 30.0))
    gevent.sleep(0.5)
    print("loading", flush=True)
    deadline = time.monotonic() + 10
    while len(failed_at) < lanes and time.monotonic() < deadline:
        gevent.sleep(0.05)
    gevent.killall(users)
    times = sorted(failed_at.values())
    return {
        "users failed": len(failed_at),
        "spread_s": times[-1] - times[0] if times else None,
        "errors": dict(errors),
        "lanes_after": multiplexer(RUN).lanes,
    }


def main() -> None:
    if sys.argv[1] == "--death":
        print(json.dumps(through_a_death(sys.argv[2])))
        return
    http, grpc = sys.argv[1:3]
    report = {}
    # The mixed runs first: each timeout run leaves the one-instance model a backlog of
    # seconds of requests nobody waits for.
    report["mixed-http"] = drive(http, "http", [GOOD, BAD], lanes=4, seconds=2, timeout_s=30)
    report["mixed-http-python"] = drive(
        http, "http", [GOOD, BAD], lanes=4, seconds=2, timeout_s=30, pump=False
    )
    report["mixed-grpc"] = drive(grpc, "grpc", [GOOD, BAD], lanes=4, seconds=2, timeout_s=30)
    report["mixed-grpc-shared"] = drive(
        grpc, "grpc", [GOOD, BAD], lanes=4, seconds=2, timeout_s=30, shared=True
    )
    for shared in (False, True):
        report["large-grpc" + ("-shared" if shared else "")] = drive(
            grpc,
            "grpc",
            [LARGE],
            lanes=4,
            seconds=2,
            timeout_s=30,
            shared=shared,
            model=LARGE_MODEL,
        )
    report["timeout-http"] = drive(http, "http", [GOOD], lanes=2, seconds=1, timeout_s=0.005)
    report["timeout-http-python"] = drive(
        http, "http", [GOOD], lanes=2, seconds=1, timeout_s=0.005, pump=False
    )
    report["timeout-grpc"] = drive(grpc, "grpc", [GOOD], lanes=2, seconds=1, timeout_s=0.005)
    report["timeout-grpc-shared"] = drive(
        grpc, "grpc", [GOOD], lanes=2, seconds=1, timeout_s=0.005, shared=True
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
