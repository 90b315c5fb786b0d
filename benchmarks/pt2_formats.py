"""One zoo model served as TorchScript, ONNX, torch.export and AOTInductor at the same
concurrency: a benchmark, not a test.

Each format is exported (the time it took is reported: an AOTInductor compile is the dear
one), python-hosted on the bundled CPU server with one instance and dynamic batching, checked
against eager PyTorch, then driven by N closed-loop HTTP clients of batch 1 for a fixed time.
Reported per format: export seconds, throughput (inferences/s), p50 and p99 latency as the
clients saw it, the server's compute per inference (compute_infer / inference_count from the
statistics API) and the average batch the dynamic batcher formed.

    python benchmarks/pt2_formats.py --model dlrm --concurrency 4 --duration 10

Formats run one after another on one server, so a run compares them on one machine state;
hardware varies between sessions: compare within one run.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass

import numpy as np

from pytest_triton import TritonClient
from pytest_triton.client.stats import read_stats
from pytest_triton.models import zoo_spec
from pytest_triton.repository.builder import Repository
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.session.deployment import Deployment, ServedModel

FORMATS = ("torchscript-trace", "onnx", "torch-export", "aoti")


@dataclass(frozen=True)
class Row:
    """One format's figures."""

    fmt: str
    export_s: float
    throughput: float
    p50_ms: float
    p99_ms: float
    compute_us: float
    avg_batch: float


def drive(
    url: str, model: ServedModel, concurrency: int, duration: float
) -> tuple[list[float], int]:
    """Closed-loop clients of batch 1 for `duration` seconds; their latencies in seconds."""
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    deadline = time.perf_counter() + duration

    def user(index: int) -> None:
        client = TritonClient(url, "http")
        inputs = model.inputs(batch_size=1, seed=index)
        outputs = list(model.variant.spec.output_names)
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                client.infer(model.name, inputs, outputs=outputs)
                latencies[index].append(time.perf_counter() - started)
        finally:
            client.close()

    threads = [threading.Thread(target=user, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [x for each in latencies for x in each]
    return flat, len(flat)


def measure(
    deployment: Deployment, model: ServedModel, export_s: float, args: argparse.Namespace
) -> Row:
    """Parity first (a fast wrong answer is no result), a warm-up, then the timed run."""
    client = deployment.client("http")
    model.assert_parity(client, batch_size=4)
    drive(deployment.server.endpoints.http, model, args.concurrency, min(2.0, args.duration))
    before = read_stats(client, model.name)
    latencies, count = drive(
        deployment.server.endpoints.http, model, args.concurrency, args.duration
    )
    delta = read_stats(client, model.name) - before
    ms = np.asarray(latencies) * 1e3
    return Row(
        model.variant.format,
        export_s,
        count / args.duration,
        float(np.percentile(ms, 50)),
        float(np.percentile(ms, 99)),
        delta.compute_infer.ns / 1e3 / max(delta.inference_count, 1),
        delta.avg_batch_size,
    )


def table(rows: list[Row], args: argparse.Namespace) -> str:
    lines = [
        f"{args.model} (small), batch 1, concurrency {args.concurrency}, {args.duration:g} s "
        "a format, python-hosted on the bundled CPU server, one instance",
        "",
        "| format | export (s) | infer/s | p50 (ms) | p99 (ms) | compute/inference (µs) "
        "| avg batch |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.fmt} | {r.export_s:.1f} | {r.throughput:.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} "
        f"| {r.compute_us:.0f} | {r.avg_batch:.2f} |"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="dlrm")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    repo = Repository.create([zoo_spec(args.model, instance_count=1, formats=formats)])
    try:
        launcher = LocalLauncher()
        variants = repo.plan(launcher.target())
        export_s = {}
        for variant in variants:
            started = time.perf_counter()
            repo.ensure(variant)
            export_s[variant.id] = time.perf_counter() - started
        server_args = ServerArgs(repo.root, model_control_mode="explicit", startup_timeout_s=120)
        with launcher.start(server_args) as server:
            deployment = Deployment(server, repo)
            try:
                rows = [
                    measure(deployment, deployment.model(v), export_s[v.id], args) for v in variants
                ]
            finally:
                deployment.close()
        print(table(rows, args))
    finally:
        repo.remove()


if __name__ == "__main__":
    main()
