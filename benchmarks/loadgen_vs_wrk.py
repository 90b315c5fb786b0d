"""How much load can the Locust users generate? A benchmark against wrk and perf_analyzer,
not a test.

The tools drive the same trivial python-backend model (Y = X, dynamic batching without delay,
so the server outpaces the generator) at the same concurrency, each from one process: wrk with
tritonclient's binary-tensor HTTP body, our Locust users over HTTP and gRPC, perf_analyzer 2.51
over gRPC and HTTP. Reported: each generator's samples/s divided by wrk's requests/s (batch 1:
a request is a sample), its client-side overhead (average latency minus the server's average
request latency, from the statistics API) and its CPU (user + system) per request, and the
targets: Locust-HTTP / wrk >= 0.95 and Locust-gRPC / perf_analyzer-gRPC >= 1.0 (medians over
the rounds; exit 1 when one is missed).

    apt-get install wrk                       # Debian's wrk
    make perf-analyzer                        # perf_analyzer 2.51 into .tools/
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
from perf_analyzer_tool import MISSING, find_perf_analyzer, run_perf_analyzer, unstable_figures
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


def wrk_command(url: str, script: Path, concurrency: int, duration: int) -> list[str]:
    """wrk on one thread at `concurrency` connections, sending `script`'s request."""
    return [
        "wrk",
        "-t",
        "1",
        "-c",
        str(concurrency),
        "-d",
        f"{duration}s",
        "--latency",
        "-s",
        str(script),
        f"http://{url}/v2/models/{MODEL}/infer",
    ]


def locust_command(host: str, concurrency: int, duration: int) -> list[str]:
    """The benchmark's Locust users (trivial_locustfile.py) at `concurrency`, headless; the
    protocol from the host's scheme (http:// or grpc://)."""
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(HERE / "trivial_locustfile.py"),
        "--headless",
        "-u",
        str(concurrency),
        "-r",
        str(concurrency),
        "-t",
        f"{duration}s",
        "--host",
        host,
        "--only-summary",
        # a benchmark, not a gate: windows that disagree on a busy machine still count
        "--triton-allow-unstable",
    ]


def run_wrk(
    url: str, script: Path, args: argparse.Namespace, client: TritonClient
) -> dict[str, float]:
    before = read_stats(client, MODEL)
    cmd = wrk_command(url, script, args.concurrency, args.duration)
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


def run_pa(
    executable: Path,
    url: str,
    protocol: str,
    args: argparse.Namespace,
    client: TritonClient,
    workdir: Path,
) -> dict[str, float]:
    """perf_analyzer in its concurrency mode: windows of a third of --duration (it measures at
    least three), stability 20% (windows on a shared 2-core machine vary by 10-30%). Its CPU
    per request counts every request of the run (the server's count), warm-up included."""
    before = read_stats(client, MODEL)
    window_ms = max(int(args.duration * 1000 / 3), 500)
    cmd = ["-m", MODEL, "-u", url, "-i", protocol, "--concurrency-range", str(args.concurrency)]
    cmd += ["-p", str(window_ms), "-s", "20", "-r", "10", "--verbose-csv", "-v"]  # -v: windows
    done = run_perf_analyzer(executable, cmd, workdir / f"pa-{protocol}.csv")
    if done.returncode == 0 and done.rows:
        row = done.rows[-1]
        rate, avg_us = float(row["Inferences/Second"]), float(row["Avg latency"])
    else:  # a busy machine: windows that never agreed still measured the load
        unstable = unstable_figures(done.output)
        if unstable is None:
            raise SystemExit(f"perf_analyzer failed ({done.returncode}):\n{done.output[-3000:]}")
        rate, avg_us, _ = unstable
        print(f"perf_analyzer-{protocol}: not stable, its last 3 windows", file=sys.stderr)
    server = stats_delta(client, before, 1)
    return {
        "rate": rate,
        "avg_ms": avg_us / 1e3,
        "server_ms": server.success.avg_us / 1e3,
        "cpu_percent": 100 * done.cpu_s / done.wall_s,
        "requests": server.requests,
        "cpu_us_per_request": 1e6 * done.cpu_s / max(server.requests, 1),
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
        *locust_command(host, args.concurrency, args.duration),
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
    parser.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="wrk connections = Locust users = perf_analyzer's concurrency",
    )
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
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        print(MISSING, file=sys.stderr)
        return 2
    if args.py_spy is not None and py_spy() is None:
        print("py-spy is not installed: pip install py-spy (in the dev extra)", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="pytest-triton-wrk-"))
    try:
        write_trivial(workdir / "repo")
        script = wrk_files(workdir)
        runs: dict[str, list[dict[str, float]]] = {
            tool: [] for tool in ("wrk", "locust-http", "locust-grpc", "pa-http", "pa-grpc")
        }
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
                for protocol in ("http", "grpc"):
                    runs[f"pa-{protocol}"].append(
                        run_pa(
                            perf_analyzer,
                            server.endpoints.url(protocol),
                            protocol,
                            args,
                            client,
                            workdir,
                        )
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
    targets = [
        ("Locust-HTTP / wrk", median["locust-http"]["rate"] / wrk_rate, 0.95),
        (
            "Locust-gRPC / perf_analyzer-gRPC",
            median["locust-grpc"]["rate"] / median["pa-grpc"]["rate"],
            1.0,
        ),
    ]
    print()
    for label, ratio, target in targets:
        verdict = "PASS" if ratio >= target else "FAIL"
        print(f"{label}: {ratio:.2f} (target >= {target:.2f}): {verdict}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "runs": runs,
                    "median": median,
                    "targets": {label: [ratio, target] for label, ratio, target in targets},
                },
                indent=2,
            )
        )
    return 0 if all(ratio >= target for _, ratio, target in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
