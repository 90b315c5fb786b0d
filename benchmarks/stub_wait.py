"""What the stubs' waiting threads cost: the server CPU one request takes from a torch-hosted
and an onnxruntime-hosted DLRM, with idle threads spinning (OMP_WAIT_POLICY=ACTIVE for torch's
libgomp, the config parameter allow_spinning=1 for onnxruntime) and sleeping (PASSIVE and
allow_spinning 0: the local launcher's and the hosted model's defaults on a CPU). A
benchmark, not a test.

Requests go one at a time with a short pause between them, as parity checks and a light load
send them, while `--burners` busy loops keep the cores as busy as the test suite does (its
three workers, their servers and stubs on two cores). Rounds alternate the policies so that
drift hits both alike; the server's CPU is read from its process tree (server and stubs).

    python benchmarks/stub_wait.py                       # 2 burners, 200 requests, 2 rounds
    python benchmarks/stub_wait.py --burners 0 --requests 400
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Iterator

import psutil

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.setting_sources import from_environ
from pytest_triton.models import zoo_spec
from pytest_triton.repository.builder import Repository
from pytest_triton.server.local import WAIT_POLICY
from pytest_triton.session.lifecycle import start_deployment

MODELS = ("dlrm-torchscript-trace-hosted", "dlrm-onnx-hosted")


def _burn() -> None:
    while True:
        pass


@contextlib.contextmanager
def burners(count: int) -> Iterator[None]:
    procs = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(count)]
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.join()


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its live descendants (the server and its stubs)."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in (root, *root.children(recursive=True)):
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def repository(policy: str) -> Repository:
    spin = "1" if policy == "ACTIVE" else "0"
    spec = zoo_spec(
        "dlrm", "small", formats=["torchscript-trace", "onnx"], parameters={"allow_spinning": spin}
    )
    return Repository.create([spec], progress=lambda m: print(f"[stub-wait] {m}", file=sys.stderr))


def measure(policy: str, requests: int) -> dict[str, float]:
    """Server CPU milliseconds per request of each model, under one wait policy."""
    os.environ[WAIT_POLICY] = policy  # the server's environment starts from this one
    repo = repository(policy)
    config = resolve(from_environ(os.environ, "pytest"), launcher="local", model_control="none")
    deployment = start_deployment(config, repo)
    try:
        server = next(
            p.pid for p in psutil.Process().children(recursive=True) if p.name() == "tritonserver"
        )
        client = deployment.client("http")
        spent: dict[str, float] = {}
        for name in MODELS:
            model = deployment.model(name)
            inputs = model.inputs(4, 0)
            for _ in range(20):  # warm-up
                client.infer(model.name, inputs)
            before = tree_cpu_s(server)
            for _ in range(requests):
                client.infer(model.name, inputs)
                time.sleep(0.003)
            spent[name] = 1e3 * (tree_cpu_s(server) - before) / requests
        return spent
    finally:
        deployment.close()
        repo.remove()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--burners", type=int, default=2, help="busy loops beside the server")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2, help="rounds of both policies")
    args = parser.parse_args(argv)
    runs: dict[tuple[str, str], list[float]] = {}
    with burners(args.burners):
        for _ in range(args.repeat):
            for policy in ("ACTIVE", "PASSIVE"):
                for name, ms in measure(policy, args.requests).items():
                    runs.setdefault((policy, name), []).append(ms)
    print(f"server CPU per request, ms (median of {args.repeat}; {args.burners} burners)\n")
    print("| model | spinning (ACTIVE) | sleeping (PASSIVE) | ratio |")
    print("|---|---:|---:|---:|")
    for name in MODELS:
        active = statistics.median(runs[("ACTIVE", name)])
        passive = statistics.median(runs[("PASSIVE", name)])
        print(f"| {name} | {active:.2f} | {passive:.2f} | {active / passive:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
