"""Run a pytest selection N times in a row while busy processes keep the cores loaded.

A flaky test is a bug: this is how a fix is proven (a test that failed one run in five must
pass 20 runs in a row with both cores busy), not a way to retry anything into green.

    python benchmarks/repeat_under_load.py -n 20 --hogs 2 \
        "tests/load/test_locust_runs.py::test_users_keep_requests_in_flight_together[grpc]"

Exits non-zero at the first failing run and prints its output tail.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("selection", nargs="+", help="pytest node ids or arguments")
    parser.add_argument("-n", "--runs", type=int, default=20, help="runs in a row (default 20)")
    parser.add_argument(
        "--hogs",
        type=int,
        default=2,
        help="busy-looping processes kept running meanwhile (default 2)",
    )
    args = parser.parse_args(argv)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.selection],
                capture_output=True,
                text=True,
            )
            wall = time.monotonic() - started
            print(f"run {run}/{args.runs}: exit {done.returncode} in {wall:.1f}s", flush=True)
            if done.returncode != 0:
                print("\n".join((done.stdout + done.stderr).splitlines()[-80:]))
                return 1
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"all {args.runs} runs passed with {args.hogs} busy process(es)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
