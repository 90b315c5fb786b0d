"""The least CPU per request any Python generator spends here: a benchmark, not a test.

A plain loop over select.epoll with eight keep-alive HTTP/1.1 connections on raw sockets,
sending tritonclient's request bytes for loadgen_vs_wrk.py's trivial model and keeping only a
list of latencies (no Locust, no gevent, no statistics), beside wrk at the same concurrency on
the same server. What it spends is the floor under the Locust users' CPU per request
(docs/performance.md: the generator's targets against wrk).

    python benchmarks/python_floor.py --duration 10 --rounds 2
"""

from __future__ import annotations

import argparse
import re
import resource
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadgen_vs_wrk import MODEL, cpu_seconds_of, write_trivial, wrk_command, wrk_files

from pytest_triton.server import LocalLauncher, ServerArgs

CONNECTIONS = 8
WARMUP_S = 2.0


def request_bytes(workdir: Path, hostport: str) -> bytes:
    """The request wrk sends (loadgen_vs_wrk.wrk_files), with its HTTP head."""
    script = wrk_files(workdir)
    body = (workdir / "body.bin").read_bytes()
    found = re.search(r'Length"\] = "(\d+)"', script.read_text())
    assert found is not None
    head = (
        f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: {hostport}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {found.group(1)}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def plain_loop(hostport: str, request: bytes, seconds: float) -> tuple[float, float, float]:
    """(requests/s, user µs and system µs a request) after WARMUP_S of the same loop."""
    host, port = hostport.rsplit(":", 1)
    poller = select.epoll()
    connections: dict[int, tuple[socket.socket, bytearray, list[float]]] = {}
    for _ in range(CONNECTIONS):
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        connections[sock.fileno()] = (sock, bytearray(), [time.perf_counter()])
        poller.register(sock.fileno(), select.EPOLLIN)
        sock.send(request)
    latencies: list[float] = []
    start = time.perf_counter()
    measured_from, counted_from, before = 0.0, 0, resource.getrusage(resource.RUSAGE_SELF)
    while (now := time.perf_counter()) - start < WARMUP_S + seconds:
        if not measured_from and now - start >= WARMUP_S:
            measured_from, counted_from = now, len(latencies)
            before = resource.getrusage(resource.RUSAGE_SELF)
        for fd, _ in poller.poll(0.01):
            sock, buffer, sent = connections[fd]
            buffer += sock.recv(65536)
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                continue
            size = re.search(rb"(?i)content-length:\s*(\d+)", buffer[:end])
            assert size is not None
            whole = end + 4 + int(size.group(1))
            if len(buffer) < whole:
                continue
            latencies.append(time.perf_counter() - sent[0])
            del buffer[:whole]
            sent[0] = time.perf_counter()
            sock.send(request)
    after = resource.getrusage(resource.RUSAGE_SELF)
    count = len(latencies) - counted_from
    for sock, _, _ in connections.values():
        sock.close()
    return (
        count / (time.perf_counter() - measured_from),
        1e6 * (after.ru_utime - before.ru_utime) / count,
        1e6 * (after.ru_stime - before.ru_stime) / count,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured per run")
    parser.add_argument("--rounds", type=int, default=2, help="wrk and the loop, in turn")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pytest-triton-floor-"))
    write_trivial(workdir / "repo")
    with LocalLauncher().start(ServerArgs(workdir / "repo", model_control_mode="none")) as server:
        hostport = server.endpoints.http
        request = request_bytes(workdir, hostport)
        script = workdir / "infer.lua"
        print("| round | wrk req/s | wrk CPU a request | loop req/s | loop user | loop system |")
        print("|---|---|---|---|---|---|")
        for i in range(args.rounds):
            wrk = subprocess.Popen(
                wrk_command(hostport, script, CONNECTIONS, int(args.duration)),
                stdout=subprocess.PIPE,
                text=True,
            )
            assert wrk.stdout is not None
            out = wrk.stdout.read()
            _, cpu = cpu_seconds_of(wrk)
            total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
            rate, user, system = plain_loop(hostport, request, args.duration)
            print(
                f"| {i + 1} | {total / args.duration:,.0f} | {1e6 * cpu / total:.1f} µs | "
                f"{rate:,.0f} | {user:.1f} µs | {system:.1f} µs |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
