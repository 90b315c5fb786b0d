"""Where a load generator's CPU goes at steady state: user space against the kernel, per
request. A benchmark, not a test.

loadgen_vs_wrk.py gives each generator's whole CPU per request; this one separates the two
halves. It serves loadgen_vs_wrk.py's trivial model and runs wrk, the Locust users over HTTP
and over gRPC at the same concurrency, each for `--duration` seconds, and reads the
generator's user and system CPU (/proc, the process and its children) and the server's
request count between two instants well inside the run (after `--settle` seconds, until 2 s
before its end): warm-up and shutdown do not count. A generator whose system CPU matches
wrk's makes no more system calls than it; what it spends above wrk in user space is its own
code's.

    python benchmarks/generator_cpu_split.py                   # c=8, 12-s runs, 1 round
    python benchmarks/generator_cpu_split.py --rounds 3 --concurrency 16
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from loadgen_vs_wrk import MODEL, locust_command, write_trivial, wrk_command, wrk_files

from pytest_triton import TritonClient
from pytest_triton.client.stats import read_stats
from pytest_triton.server import LocalLauncher, ServerArgs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process and its live children."""
    user = system = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        user, system = user + times.user, system + times.system
    return user, system


def measure(
    name: str, cmd: list[str], client: TritonClient, args: argparse.Namespace
) -> dict[str, float]:
    """Run one generator and return its steady-state figures."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(HERE), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO
    )
    try:
        time.sleep(args.settle)
        u0, s0 = cpu_seconds(proc.pid)
        r0, w0 = read_stats(client, MODEL).requests, time.monotonic()
        time.sleep(args.duration - args.settle - 2)
        u1, s1 = cpu_seconds(proc.pid)
        r1, w1 = read_stats(client, MODEL).requests, time.monotonic()
    finally:
        _, err = proc.communicate(timeout=args.duration + 60)
    if proc.returncode not in (0, None):
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{err.decode()[-2000:]}")
    n = max(r1 - r0, 1)
    return {
        "rate": n / (w1 - w0),
        "user_us": 1e6 * (u1 - u0) / n,
        "system_us": 1e6 * (s1 - s0) / n,
    }


def commands(http: str, grpc: str, script: Path, args: argparse.Namespace) -> dict[str, list[str]]:
    found = {
        "locust-http": locust_command(f"http://{http}", args.concurrency, args.duration),
        "locust-grpc": locust_command(f"grpc://{grpc}", args.concurrency, args.duration),
    }
    if not shutil.which("wrk"):
        print("wrk not found (apt-get install wrk): Locust only", file=sys.stderr)
        return found
    return {"wrk": wrk_command(http, script, args.concurrency, args.duration), **found}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--duration", type=int, default=12, help="seconds per run")
    parser.add_argument("--settle", type=float, default=4.0, help="seconds not measured")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if args.duration - args.settle < 4:
        parser.error("--duration must leave at least 4 s after --settle")
    root = Path(tempfile.mkdtemp(prefix="generator-cpu-split-"))
    try:
        write_trivial(root)
        script = wrk_files(root)
        with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as server:
            e = server.endpoints
            client = TritonClient(e.http, "http")
            print(f"\nconcurrency {args.concurrency}, steady state of {args.duration}-s runs\n")
            print("| generator | round | req/s | user µs/req | system µs/req | total µs/req |")
            print("|---|---|---|---|---|---|")
            for number in range(1, args.rounds + 1):
                for name, cmd in commands(e.http, e.grpc, script, args).items():
                    m = measure(name, cmd, client, args)
                    total = m["user_us"] + m["system_us"]
                    print(
                        f"| {name} | {number} | {m['rate']:,.0f} | {m['user_us']:.1f} | "
                        f"{m['system_us']:.1f} | {total:.1f} |",
                        flush=True,
                    )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
