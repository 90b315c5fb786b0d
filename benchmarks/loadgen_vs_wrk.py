"""How much load can the Locust users generate? A benchmark against wrk, not a test.

Both tools drive the same trivial python-backend model (Y = X, dynamic batching without delay,
so the server outpaces the generator) at the same concurrency, with the same HTTP request
bytes (tritonclient's binary-tensor body), each from one process. Reported: Locust samples/s
divided by wrk requests/s (batch 1: a request is a sample), each tool's client-side
overhead (its average latency minus the server's average request latency, from the statistics
API) and the generator's CPU per request.

    apt-get install wrk                       # Debian's wrk
    python benchmarks/loadgen_vs_wrk.py --duration 10 --concurrency 8 --repeat 3
    python benchmarks/loadgen_vs_wrk.py --repeat 1 --py-spy profiles/   # + flame graphs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton import TritonClient
from pytest_triton.client.stats import ModelStats, read_stats
from pytest_triton.repository import pbtxt
from pytest_triton.server import LocalLauncher, ServerArgs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODEL = "trivial"
TRIVIAL_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""


def write_trivial(root: Path) -> None:
    directory = root / MODEL
    (directory / "1").mkdir(parents=True)
    (directory / "1" / "model.py").write_text(TRIVIAL_MODEL)
    config = mc.ModelConfig(name=MODEL, backend="python", max_batch_size=64)
    config.input.append(mc.ModelInput(name="X", data_type=mc.TYPE_FP32, dims=[4]))
    config.output.append(mc.ModelOutput(name="Y", data_type=mc.TYPE_FP32, dims=[4]))
    config.dynamic_batching.SetInParent()
    pbtxt.write_config(directory, config)


WRK_SCRIPT = """
local f = assert(io.open("{body}", "rb"))
wrk.method = "POST"
wrk.body = f:read("*all")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "{json_size}"
"""


def wrk_files(workdir: Path) -> Path:
    """The exact request tritonclient sends (binary tensor after a JSON header), for wrk."""
    item = httpclient.InferInput("X", [1, 4], "FP32")
    item.set_data_from_numpy(np.full((1, 4), 3, dtype=np.float32), binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([item])
    (workdir / "body.bin").write_bytes(body)
    script = workdir / "infer.lua"
    script.write_text(WRK_SCRIPT.format(body=workdir / "body.bin", json_size=json_size))
    return script


def cpu_seconds_of(proc: subprocess.Popen[Any]) -> tuple[int, float]:
    """Wait for a child and return (exit code, its user + system CPU seconds)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def stats_delta(client: TritonClient, before: ModelStats, expect: int) -> ModelStats:
    deadline = time.monotonic() + 3
    delta = read_stats(client, MODEL) - before
    while delta.requests < expect and time.monotonic() < deadline:
        time.sleep(0.05)
        delta = read_stats(client, MODEL) - before
    return delta


def run_wrk(
    url: str, script: Path, args: argparse.Namespace, client: TritonClient
) -> dict[str, float]:
    before = read_stats(client, MODEL)
    cmd = [
        "wrk",
        "-t",
        "1",
        "-c",
        str(args.concurrency),
        "-d",
        f"{args.duration}s",
        "--latency",
        "-s",
        str(script),
        f"http://{url}/v2/models/{MODEL}/infer",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    code, cpu = cpu_seconds_of(proc)
    if code != 0 or "Non-2xx" in out:
        raise SystemExit(f"wrk failed or got errors:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    avg = re.search(r"Latency\s+([\d.]+)(us|ms|s)", out)
    assert avg is not None
    avg_ms = float(avg.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[avg.group(2)]
    server = stats_delta(client, before, total)
    return {
        "rate": rate,
        "avg_ms": avg_ms,
        "server_ms": server.success.avg_us / 1e3,
        "cpu_percent": 100 * cpu / args.duration,
        "requests": total,
        "cpu_us_per_request": 1e6 * cpu / max(total, 1),
    }


def py_spy() -> Path | None:
    """py-spy on PATH, or next to this interpreter (a virtual environment not activated)."""
    found = shutil.which("py-spy")
    beside = Path(sys.executable).parent / "py-spy"
    return Path(found) if found else beside if beside.exists() else None


def run_locust(host: str, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    report = workdir / f"locust-{time.monotonic_ns()}.json"
    profile: list[str] = []
    if args.py_spy is not None:  # a flame graph of the generator (py-spy slows it a little)
        args.py_spy.mkdir(parents=True, exist_ok=True)
        svg = args.py_spy / f"locust-{host.split(':', 1)[0]}-{time.strftime('%H%M%S')}.svg"
        profile = [
            str(py_spy()),
            "record",
            "--rate",
            "100",
            "--format",
            "flamegraph",
            "-o",
            str(svg),
            "--",
        ]
    cmd = [
        *profile,
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(HERE / "trivial_locustfile.py"),
        "--headless",
        "-u",
        str(args.concurrency),
        "-r",
        str(args.concurrency),
        "-t",
        f"{args.duration}s",
        "--host",
        host,
        "--only-summary",
        # a benchmark, not a gate: windows that disagree on a busy machine still count
        "--triton-allow-unstable",
        "--triton-report-json",
        str(report),
    ]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=args.duration + 120, cwd=REPO
    )
    if done.returncode != 0:
        raise SystemExit(f"locust failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(report.read_text())
    (server,) = result["server"]
    rate = result["measured"]["throughput"]
    cpu = result["generator_cpu_percent"]
    return {
        "rate": rate,
        "avg_ms": result["measured"]["avg_ms"],
        "server_ms": server["latency_us"]["request"] / 1e3,
        "cpu_percent": cpu,
        "requests": result["measured"]["requests"],
        "cpu_us_per_request": 1e4 * cpu / max(rate, 1e-9),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per run")
    parser.add_argument("--concurrency", type=int, default=8, help="wrk connections = Locust users")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs per tool")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="DIR",
        help="record each Locust run with py-spy into DIR (flame graphs)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk", file=sys.stderr)
        return 2
    if args.py_spy is not None and py_spy() is None:
        print("py-spy is not installed: pip install py-spy (in the dev extra)", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="pytest-triton-wrk-"))
    try:
        write_trivial(workdir / "repo")
        script = wrk_files(workdir)
        runs: dict[str, list[dict[str, float]]] = {"wrk": [], "locust-http": [], "locust-grpc": []}
        with LocalLauncher().start(
            ServerArgs(workdir / "repo", model_control_mode="none", startup_timeout_s=60)
        ) as server:
            client = TritonClient(server.endpoints.http, "http")
            for i in range(args.repeat):
                print(f"round {i + 1}/{args.repeat} ...", file=sys.stderr, flush=True)
                runs["wrk"].append(run_wrk(server.endpoints.http, script, args, client))
                runs["locust-http"].append(
                    run_locust(f"http://{server.endpoints.http}", args, workdir)
                )
                runs["locust-grpc"].append(
                    run_locust(f"grpc://{server.endpoints.grpc}", args, workdir)
                )
            client.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    median = {
        tool: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for tool, rs in runs.items()
    }
    wrk_rate = median["wrk"]["rate"]
    print(
        f"\nconcurrency {args.concurrency}, {args.duration} s runs, median of "
        f"{args.repeat}, trivial model, batch 1\n"
    )
    print(
        "| generator | throughput | / wrk | avg latency | server request latency | "
        "client overhead | generator CPU | CPU per request |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for tool, m in median.items():
        print(
            f"| {tool} | {m['rate']:,.0f} req/s | {m['rate'] / wrk_rate:.2f} | "
            f"{m['avg_ms']:.2f} ms | {m['server_ms']:.2f} ms | "
            f"{m['avg_ms'] - m['server_ms']:.2f} ms | {m['cpu_percent']:.0f}% | "
            f"{m['cpu_us_per_request']:.0f} µs |"
        )
    print(
        "\nratios per round: "
        + "; ".join(
            f"{tool} "
            + ", ".join(
                f"{r['rate'] / w['rate']:.2f}" for r, w in zip(runs[tool], runs["wrk"], strict=True)
            )
            for tool in runs
            if tool != "wrk"
        )
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "runs": runs, "median": median},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
