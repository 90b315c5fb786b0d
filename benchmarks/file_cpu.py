"""What a test file costs in CPU, all of it: each file's pytest runs as a child of this process,
which makes itself the child subreaper of its descendants and reaps every one, so the python
stubs that outlive their servers (reparented to init otherwise, and counted by no one) are in
the figure. A benchmark, not a test: run it on a quiet machine, one file at a time.

    python benchmarks/file_cpu.py tests/load/test_tune.py tests/client/test_shared_memory.py
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reap_all() -> None:
    """Wait for every descendant this process adopted, until none is left."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def measure(test_file: str) -> tuple[float, float, int]:
    """CPU seconds (the whole tree's), wall seconds and pytest's exit code for one file."""
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    before, started = children_cpu_s(), time.monotonic()
    code = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", test_file],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        check=False,
    ).returncode
    reap_all()
    return children_cpu_s() - before, time.monotonic() - started, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="test files, each run in a pytest of its own")
    args = parser.parse_args()
    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        parser.error(f"no such test file: {', '.join(missing)}")
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        parser.error("prctl(PR_SET_CHILD_SUBREAPER) failed: this needs Linux")
    print("| CPU (core-s) | wall (s) | pytest exit | file |\n|---|---|---|---|")
    for test_file in args.files:
        cpu, wall, code = measure(test_file)
        print(f"| {cpu:.1f} | {wall:.1f} | {code} | `{test_file}` |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
