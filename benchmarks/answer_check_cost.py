"""What checking answers under load costs the load generator: a benchmark, not a test.

The cheapest requests (the trivial python model of loadgen_vs_wrk.py, Y = X, batch 1, 8 users,
one Locust process) with --triton-check-every 0 (no checks), and N = 1000, 100, 10, 1 (every
answer's shapes and dtypes, the values of one in N), on both protocols. Reported: the
generator's CPU per request (its CPU over the run, from the run's JSON report, divided by the
requests) and the share checking adds to the unchecked run's.

On a shared 2-core machine those end-to-end figures move by more than checking costs, so the
check is also timed on its own, in this process: one real answer of the same server, checked
again and again the three ways a user checks it (an unsampled answer whose header was seen
right before; a sampled answer equal byte for byte to one compared before; a sampled answer
decoded and compared), and what that makes per request at one answer in N.

    python benchmarks/answer_check_cost.py --duration 10 --repeat 2
    python benchmarks/answer_check_cost.py --in-process-only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from loadgen_vs_wrk import MODEL, write_trivial

from pytest_triton import TritonClient
from pytest_triton.parity.answers import AnswerCheck
from pytest_triton.server import LocalLauncher, ServerArgs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EVERY = (0, 1000, 100, 10, 1)


def run(host: str, grpc: str, protocol: str, every: int, args: argparse.Namespace) -> float:
    """The generator's CPU per request, in µs."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "LOCUST_"))}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)])
        cmd = [
            sys.executable, "-m", "locust", "-f", str(HERE / "checked_locustfile.py"),
            "--headless", "-u", str(args.users), "-r", str(args.users),
            "-t", f"{args.duration}s", "--host", f"http://{host}",
            "--triton-grpc-url", f"grpc://{grpc}", "--triton-protocol", protocol,
            "--triton-check-every", str(every), "--triton-allow-unstable",
            "--triton-report-json", str(report),
        ]  # fmt: skip
        subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, timeout=args.duration + 120)
        result: dict[str, Any] = json.loads(report.read_text())
    measured = result["measured"]
    if measured["failures"]:
        raise SystemExit(f"{protocol} every {every}: {measured['failures']} failed requests")
    cpu_s = result["generator_cpu_percent"] / 100 * measured["duration_s"]
    return 1e6 * cpu_s / measured["requests"]


def per_call_us(call: Callable[[], object], seconds: float = 1.0) -> float:
    """Median over 5 rounds of the µs one call takes (as many calls as fit in `seconds`)."""
    rounds = []
    for _ in range(5):
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / 5:
            for _ in range(100):
                call()
            count += 100
        rounds.append(elapsed / count * 1e6)
    return float(statistics.median(rounds))


def in_process(http: str, grpc: str, protocol: str) -> list[tuple[str, float]]:
    """What one check costs, timed on a real answer of the trivial model (Y = X)."""
    client = TritonClient(http if protocol == "http" else grpc, protocol)  # type: ignore[arg-type]
    try:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        request = client.prepare(MODEL, {"X": x})
        raw = client.send_answer(request)
    finally:
        client.close()
    expected = [(request, {"reference": {"Y": x}})]
    unsampled = AnswerCheck(MODEL, expected, every=0)
    assert unsampled.check(request, raw).wrong is None  # the header is now known right
    seen = AnswerCheck(MODEL, expected, every=1)
    assert seen.check(request, raw).wrong is None  # the answer is now known right

    def decoded() -> object:
        fresh = AnswerCheck(MODEL, expected, every=1)
        return fresh.check(request, raw)

    header = per_call_us(lambda: unsampled.check(request, raw))
    same = per_call_us(lambda: seen.check(request, raw))
    fresh = per_call_us(decoded)
    return [
        ("unsampled, header seen", header),
        ("sampled, equal to a compared answer", same),
        ("sampled, decoded and compared", fresh),
        ("per request at 1 in 100, worst case", header + fresh / 100),
        ("per request at 1 in 100, same answers", header + same / 100),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--every", default=",".join(map(str, EVERY)), help="comma list; 0 (no checks) is added"
    )
    parser.add_argument(
        "--in-process-only", action="store_true", help="only time the check in this process"
    )
    args = parser.parse_args()
    every_values = sorted({0, *(int(e) for e in args.every.split(","))}, key=lambda e: e or -1)
    with tempfile.TemporaryDirectory() as tmp:
        write_trivial(Path(tmp))
        with LocalLauncher().start(ServerArgs(Path(tmp), model_control_mode="none")) as server:
            timed = {
                protocol: in_process(server.endpoints.http, server.endpoints.grpc, protocol)
                for protocol in ("http", "grpc")
            }
            rows = []
            for protocol in () if args.in_process_only else ("http", "grpc"):
                cost = {
                    every: statistics.median(
                        run(server.endpoints.http, server.endpoints.grpc, protocol, every, args)
                        for _ in range(args.repeat)
                    )
                    for every in every_values
                }
                for every in every_values:
                    added = 100 * (cost[every] / cost[0] - 1)
                    label = "no checks" if every == 0 else f"every {every}"
                    rows.append((protocol, label, cost[every], added))
    print("| protocol | check, timed in one process | µs |")
    print("|---|---|---|")
    for protocol, figures in timed.items():
        for label, us in figures:
            print(f"| {protocol} | {label} | {us:.2f} |")
    if args.in_process_only:
        return
    print()
    print("| protocol | --triton-check-every | µs CPU / request | added |")
    print("|---|---|---|---|")
    for protocol, label, us, added in rows:
        print(f"| {protocol} | {label} | {us:.1f} | {added:+.0f}% |")


if __name__ == "__main__":
    main()
