"""What checking answers under load costs the load generator: a benchmark, not a test.

The cheapest requests (the trivial python model of loadgen_vs_wrk.py, Y = X, batch 1, 8 users,
one Locust process) with --triton-check-every 0 (no checks), and N = 1000, 100, 10, 1 (every
answer's shapes and dtypes, the values of one in N), on both protocols. Reported: the
generator's CPU per request (its CPU over the run, from the run's JSON report, divided by the
requests) and the share checking adds to the unchecked run's.

    python benchmarks/answer_check_cost.py --duration 10 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from loadgen_vs_wrk import write_trivial

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--every", default=",".join(map(str, EVERY)), help="comma list; 0 (no checks) is added"
    )
    args = parser.parse_args()
    every_values = sorted({0, *(int(e) for e in args.every.split(","))}, key=lambda e: e or -1)
    with tempfile.TemporaryDirectory() as tmp:
        write_trivial(Path(tmp))
        with LocalLauncher().start(ServerArgs(Path(tmp), model_control_mode="none")) as server:
            rows = []
            for protocol in ("http", "grpc"):
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
    print("| protocol | --triton-check-every | µs CPU / request | added |")
    print("|---|---|---|---|")
    for protocol, label, us, added in rows:
        print(f"| {protocol} | {label} | {us:.1f} | {added:+.0f}% |")


if __name__ == "__main__":
    main()
