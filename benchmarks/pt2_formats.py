"""Zoo models served as TorchScript, ONNX, torch.export and AOTInductor at the same
concurrency: a benchmark, not a test.

Each model (small) gets a server of its own; each of its formats is exported (the time it
took is reported, and whether the export cache held it: an AOTInductor compile is the dear
one), python-hosted on the bundled CPU server with one instance and dynamic batching, checked
against eager PyTorch, then driven by N closed-loop HTTP clients of batch 1 for a fixed time.
Reported per model and format: export seconds, throughput (inferences/s) and its ratio to
the model's TorchScript (trace) throughput, p50 and p99 latency as the clients saw it, the
server's compute per inference and the average batch the dynamic batcher formed.

    PYTEST_TRITON_EXPORT_CACHE=/tmp/pt2-cache \
        python benchmarks/pt2_formats.py --model all --concurrency 4 --duration 3

`--model` takes a zoo name, a comma list or `all`. With the export cache set, a second run
restores every export, AOTInductor's compiles included. Formats of one model run one after
another on one server, so a run compares them on one machine state; hardware varies between
sessions: compare within one run.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_triton import TritonClient
from pytest_triton.client.stats import read_stats
from pytest_triton.models import ZOO, zoo_spec
from pytest_triton.repository.builder import Repository
from pytest_triton.server import LocalLauncher, ServerArgs
from pytest_triton.session.deployment import Deployment, ServedModel

FORMATS = ("torchscript-trace", "onnx", "torch-export", "aoti")
BASELINE = "torchscript-trace"  # the ratio column divides by this format's throughput


@dataclass(frozen=True)
class Row:
    """One model's figures in one format."""

    model: str
    fmt: str
    export_s: float
    cached: bool
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


def batch_compute_ns(statistics: Mapping[str, Any]) -> int:
    """The model's executions' compute time: the sum over its batch_stats. Triton charges
    each request of a dynamic batch the whole batch's compute_infer, so the request-level
    figure divided by the inference count would count a batch once per request in it."""
    return sum(
        int(batch.get("compute_infer", {}).get("ns", 0))
        for entry in statistics.get("model_stats", [])
        for batch in entry.get("batch_stats", [])
    )


def measure(
    deployment: Deployment,
    model: ServedModel,
    export: tuple[float, bool],
    args: argparse.Namespace,
) -> Row:
    """Parity first (a fast wrong answer is no result), a warm-up, then the timed run."""
    client = deployment.client("http")
    model.assert_parity(client, batch_size=4)
    url = deployment.server.endpoints.http
    drive(url, model, args.concurrency, args.warmup)
    before, before_ns = read_stats(client, model.name), client.statistics(model.name)
    latencies, count = drive(url, model, args.concurrency, args.duration)
    delta = read_stats(client, model.name) - before
    compute_ns = batch_compute_ns(client.statistics(model.name)) - batch_compute_ns(before_ns)
    ms = np.asarray(latencies) * 1e3
    return Row(
        model.variant.spec.name,
        model.variant.format,
        export[0],
        export[1],
        count / args.duration,
        float(np.percentile(ms, 50)),
        float(np.percentile(ms, 99)),
        compute_ns / 1e3 / max(delta.inference_count, 1),
        delta.avg_batch_size,
    )


def bench_model(name: str, formats: Sequence[str], args: argparse.Namespace) -> list[Row]:
    """One model: its formats exported, served by one server, measured one after another."""
    said: list[str] = []
    repo = Repository.create(
        [zoo_spec(name, instance_count=1, formats=list(formats))], progress=said.append
    )
    try:
        launcher = LocalLauncher()
        variants = repo.plan(launcher.target())
        exports: dict[str, tuple[float, bool]] = {}
        for variant in variants:
            started = time.perf_counter()
            repo.ensure(variant)
            cached = any("from the export cache" in line for line in said if variant.id in line)
            exports[variant.id] = (time.perf_counter() - started, cached)
            print(f"[{name}] {said[-1]}", flush=True)
        server_args = ServerArgs(repo.root, model_control_mode="explicit", startup_timeout_s=120)
        with launcher.start(server_args) as server:
            deployment = Deployment(server, repo)
            try:
                return [
                    measure(deployment, deployment.model(v), exports[v.id], args) for v in variants
                ]
            finally:
                deployment.close()
    finally:
        repo.remove()


def table(rows: Sequence[Row], args: argparse.Namespace) -> str:
    """Markdown: one line a model and format, the ratio to the model's TorchScript trace."""
    baseline = {r.model: r.throughput for r in rows if r.fmt == BASELINE}
    lines = [
        f"small models, batch 1, concurrency {args.concurrency}, {args.duration:g} s a format "
        f"after {args.warmup:g} s of warm-up, python-hosted on the bundled CPU server, one "
        "instance, dynamic batching",
        "",
        "| model | format | export (s) | infer/s | vs TorchScript | p50 (ms) | p99 (ms) "
        "| compute/inference (µs) | avg batch |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: list(ZOO).index(r.model)):  # stable: formats' order
        ratio = f"{r.throughput / baseline[r.model]:.2f}x" if baseline.get(r.model) else "-"
        export = f"{r.export_s:.1f}" + (" (cache)" if r.cached else "")
        lines.append(
            f"| {r.model} | {r.fmt} | {export} | {r.throughput:.0f} | {ratio} | {r.p50_ms:.2f} "
            f"| {r.p99_ms:.2f} | {r.compute_us:.0f} | {r.avg_batch:.2f} |"
        )
    return "\n".join(lines)


def models_of(text: str) -> list[str]:
    """`all`, one zoo name or a comma list; an unknown name is refused with the choices."""
    names = list(ZOO) if text.strip() == "all" else [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n not in ZOO]
    if unknown or not names:
        raise SystemExit(f"--model {text!r}: choose 'all' or from {', '.join(ZOO)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="dlrm", help="zoo name, comma list or 'all'")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each run")
    args = parser.parse_args()
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    rows: list[Row] = []
    for name in models_of(args.model):
        rows += bench_model(name, formats, args)
    print(table(rows, args))


if __name__ == "__main__":
    main()
