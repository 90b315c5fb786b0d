"""What does serving cost? The same exported artifact run in this process vs served by Triton,
at the same batch, by 1 and 8 concurrent clients, over each transport. A benchmark, not a test.

In-process: the artifact (model.pt with torch.jit.load, model.onnx with onnxruntime) called in
a loop here. Served: the bundled tritonserver hosting that same file (python backend), clients
in threads, each with its own TritonClient and a prepared request, reading every output.
Transports: none (tensors in the request), system (shared memory), cuda (CUDA shared memory;
refused with its reason where there is no GPU). Prints a markdown table of throughput, the
served / in-process ratio and p99 latency.

    python benchmarks/serving_overhead.py                         # small DLRM b4096, ResNet50 b64
    python benchmarks/serving_overhead.py --model dlrm:4096 --duration 5 --transports none,system
    # GPU (README "Performance"): full sizes, TorchScript on the GPU, ResNet50 in fp16
    python3 benchmarks/serving_overhead.py --size full --device cuda \\
        --model dlrm:4096 --model resnet50:64:fp16 --transports none,system,cuda

Server settings (tritonserver binary, extra arguments, timeouts) come from TRITON_* variables
as in pytest-triton's settings table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pytest_triton import ConfigError, TritonClient
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.setting_sources import from_environ
from pytest_triton.client.stats import read_stats
from pytest_triton.models import zoo_spec
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.variants import Variant
from pytest_triton.session.deployment import Deployment
from pytest_triton.session.lifecycle import start_deployment

UNITS = {
    "dlrm": "rec/s",
    "resnet50": "img/s",
    "resnext101-32x4d": "img/s",
    "se-resnext101-32x4d": "img/s",
    "bert": "seq/s",
    "mnist": "img/s",
    "text_recognition": "img/s",
}


@dataclass
class Point:
    model: str
    batch: int
    mode: str  # "in-process" or the transport
    clients: int
    samples_per_s: float = float("nan")
    p99_ms: float = float("nan")
    requests: int = 0
    refused: str = ""
    server_infer_ms: float = float("nan")  # the model's own compute per execution, server side
    server_request_ms: float = float("nan")  # a request's time in the server
    # where a request's time in the server goes: queue, compute input, compute output
    server_queue_ms: float = float("nan")
    server_input_ms: float = float("nan")
    server_output_ms: float = float("nan")

    @property
    def client_ms(self) -> float:
        """A request's mean latency at the client (closed loop: clients / request rate) less
        its time in the server: the client library, the network stack and the wire."""
        mean_ms = self.clients * self.batch / self.samples_per_s * 1e3
        return mean_ms - self.server_request_ms


def measure(
    calls: list[Callable[[], Any]], batch: int, warmup_s: float, duration_s: float
) -> tuple[float, float, int]:
    """Run each call in its own thread in a closed loop; (samples/s, p99 ms, requests) over
    the window after the warm-up."""
    start = time.perf_counter() + warmup_s
    end = start + duration_s
    latencies: list[list[float]] = [[] for _ in calls]
    errors: list[BaseException] = []

    def loop(call: Callable[[], Any], sink: list[float]) -> None:
        try:
            while (now := time.perf_counter()) < end:
                call()
                done = time.perf_counter()
                if now >= start:
                    sink.append(done - now)
        except BaseException as exc:  # reported by the caller, with the point
            errors.append(exc)

    threads = [
        threading.Thread(target=loop, args=(c, s), daemon=True)
        for c, s in zip(calls, latencies, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    window = [x for sink in latencies for x in sink]
    if not window:
        return float("nan"), float("nan"), 0
    return (len(window) * batch / duration_s, float(np.percentile(window, 99)) * 1e3, len(window))


def in_process(
    variant: Variant, artifact: Path, inputs: Mapping[str, np.ndarray], device: str
) -> Callable[[], Any]:
    """The exported file itself, loaded as the hosted model.py loads it."""
    names = variant.spec.input_names
    if variant.format.startswith("onnx"):
        import onnxruntime as ort

        providers = (["CUDAExecutionProvider"] if device == "cuda" else []) + [
            "CPUExecutionProvider"
        ]
        session = ort.InferenceSession(str(artifact), providers=providers)
        feeds = {n: inputs[n] for n in names}
        return lambda: session.run(None, feeds)
    module = torch.jit.load(str(artifact), map_location=device).eval()
    tensors = [torch.from_numpy(np.ascontiguousarray(inputs[n])).to(device) for n in names]

    def run() -> Any:
        with torch.inference_mode():
            out = module(*tensors)
            outs = out if isinstance(out, tuple | list) else (out,)
            return [o.cpu().numpy() for o in outs]  # as served: outputs land in host memory

    return run


def served(
    deployment: Deployment,
    variant: Variant,
    protocol: Any,
    transport: Any,
    clients: list[TritonClient],
    count: int,
    batch: int,
) -> list[Callable[[], Any]]:
    """One client per thread, each with a prepared request of its own inputs; `clients`
    collects them for closing (their shared memory goes with them)."""
    calls = []
    for i in range(count):
        client = TritonClient(
            deployment.server.endpoints.url(protocol),
            protocol,
            server=deployment.server,
            shared_memory=transport,
            timeout_s=300,
        )
        clients.append(client)
        inputs = variant_inputs(deployment, variant, batch, seed=i)
        request = client.prepare(variant.model_name, inputs, variant.spec.output_names)
        calls.append(lambda c=client, r=request: c.send(r))
    return calls


def variant_inputs(
    deployment: Deployment, variant: Variant, batch: int, seed: int
) -> dict[str, np.ndarray]:
    native = deployment.repository.native(variant)
    return native.cast_inputs(variant.spec.make_inputs(batch, seed))


def run_model(
    name: str,
    batch: int,
    fp16: bool,
    args: argparse.Namespace,
    transports: list[str],
    clients: list[int],
) -> list[Point]:
    kind = "KIND_GPU" if args.device == "cuda" else "KIND_CPU"
    spec = zoo_spec(
        name,
        args.size,
        instance_count=args.instances,
        instance_kind=kind,
        formats=(args.format,),
        fp16=fp16,
    )
    config = resolve(
        from_environ(os.environ, "pytest"),
        launcher="local",
        model_control="explicit",
        shared_memory=tuple(transports),
    )
    repo = Repository.create(
        [spec],
        formats=(args.format,),
        progress=lambda m: print(f"[serving-overhead] {m}", file=sys.stderr),
    )
    points: list[Point] = []
    deployment = None
    try:
        deployment = start_deployment(config, repo)
        repo.device = args.device  # exports and the reference on the device that serves
        precision = "fp16" if fp16 else "fp32"
        variant = next(v for v in repo.variants if v.precision == precision)
        deployment.load(variant)
        artifact = repo.model_dir(variant) / str(spec.version) / variant.artifact
        inputs = variant_inputs(deployment, variant, batch, seed=0)
        label = f"{name}{'-fp16' if fp16 else ''}"
        local = in_process(variant, artifact, inputs, args.device)
        measured: dict[tuple[str, int], list[tuple[float, ...]]] = {}
        refused: dict[str, str] = {}
        for round_ in range(1, args.repeat + 1):  # rounds alternate: drift hits all alike
            progress(f"{label} b{batch}, round {round_}/{args.repeat}: in-process")
            measured.setdefault(("in-process", 1), []).append(
                measure([local], batch, args.warmup, args.duration)
            )
            for transport in (t for t in transports if t not in refused):
                for n in clients:
                    progress(
                        f"{label} b{batch}, round {round_}/{args.repeat}: "
                        f"{args.protocol} {transport}, {n} client(s)"
                    )
                    opened: list[TritonClient] = []
                    try:
                        calls = served(
                            deployment, variant, args.protocol, transport, opened, n, batch
                        )
                        before = read_stats(deployment.client("http"), variant.model_name)
                        result = measure(calls, batch, args.warmup, args.duration)
                        delta = read_stats(deployment.client("http"), variant.model_name) - before
                        times = delta.latency_breakdown_us()
                        measured.setdefault((transport, n), []).append(
                            (
                                *result,
                                *(
                                    times[k] / 1e3
                                    for k in (
                                        "compute_infer",
                                        "request",
                                        "queue",
                                        "compute_input",
                                        "compute_output",
                                    )
                                ),
                            )
                        )
                    except ConfigError as exc:  # a transport this machine cannot use
                        refused[transport] = str(exc)
                        break
                    finally:
                        for client in opened:
                            client.close()
        for (mode, n), results in measured.items():
            infer, request, queue, cin, cout = (
                statistics.median(r[i] for r in results) if len(results[0]) > 3 else float("nan")
                for i in (3, 4, 5, 6, 7)
            )
            points.append(
                Point(
                    label,
                    batch,
                    mode,
                    n,
                    statistics.median(r[0] for r in results),
                    statistics.median(r[1] for r in results),
                    int(sum(r[2] for r in results)),
                    server_infer_ms=infer,
                    server_request_ms=request,
                    server_queue_ms=queue,
                    server_input_ms=cin,
                    server_output_ms=cout,
                )
            )
        points += [Point(label, batch, t, 0, refused=reason) for t, reason in refused.items()]
    finally:
        if deployment is not None:
            deployment.close()
        repo.remove()
    return points


def progress(message: str) -> None:
    print(f"[serving-overhead] {message}", file=sys.stderr, flush=True)


def table(points: list[Point], protocol: str) -> str:
    lines = [
        f"| model | batch | transport ({protocol}) | clients | throughput | "
        "/ in-process | p99 latency | server: request / compute | where a request's time "
        "goes: client + queue + compute input + infer + output (ms) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base = {p.model: p for p in points if p.mode == "in-process"}
    for p in points:
        unit = UNITS.get(p.model.removesuffix("-fp16"), "samples/s")
        if p.refused:
            lines.append(f"| {p.model} | {p.batch} | {p.mode} | - | refused: {p.refused} | | | | |")
            continue
        ratio = p.samples_per_s / base[p.model].samples_per_s if p.model in base else 1.0
        clients = p.clients if p.mode != "in-process" else "-"
        served = p.server_request_ms == p.server_request_ms  # not NaN: measured in a server
        server = f"{p.server_request_ms:.1f} / {p.server_infer_ms:.1f} ms" if served else ""
        parts = (
            p.client_ms,
            p.server_queue_ms,
            p.server_input_ms,
            p.server_infer_ms,
            p.server_output_ms,
        )
        breakdown = " + ".join(f"{x:.1f}" for x in parts) if served else ""
        lines.append(
            f"| {p.model} | {p.batch} | {p.mode} | {clients} | "
            f"{p.samples_per_s:,.0f} {unit} | {ratio:.2f} | {p.p99_ms:.1f} ms | "
            f"{server} | {breakdown} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="NAME:BATCH[:fp16]",
        help="zoo model and batch (repeatable; default dlrm:4096 and resnet50:64)",
    )
    parser.add_argument("--size", choices=("small", "full"), default="small")
    parser.add_argument(
        "--format",
        default="torchscript-trace",
        choices=("torchscript-script", "torchscript-trace", "onnx"),
        help="the artifact run in-process and served (default torchscript-trace)",
    )
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--transports", default="none,system,cuda")
    parser.add_argument("--clients", default="1,8", help="concurrent clients (comma list)")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the server's instances and the in-process run compute",
    )
    parser.add_argument("--instances", type=int, default=1, help="server instances")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads of the in-process run and of each hosted "
        "instance (OMP_NUM_THREADS in the server's environment; default 1: "
        "on a shared CPU, two OpenMP threads per instance made the hosted "
        "model 4-10x slower than in-process)",
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per point")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of every point; medians are reported"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    models = args.model or ["dlrm:4096", "resnet50:64"]
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    clients = [int(c) for c in args.clients.split(",")]
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the local server's python stubs inherit it
    points: list[Point] = []
    for entry in models:
        name, batch, *rest = entry.split(":")
        points += run_model(name, int(batch), rest == ["fp16"], args, transports, clients)
    load = os.getloadavg()
    print(
        f"\n{args.size} models, {args.format} hosted by the python backend on "
        f"{args.device}, {args.instances} instance(s) x {args.threads} thread(s) (and "
        f"{args.threads} in-process), {args.protocol}, median of "
        f"{args.repeat} x {args.duration:g} s per point; {os.cpu_count()} cores, load "
        f"average {load[0]:.1f} at the end\n"
    )
    print(table(points, args.protocol))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "points": [asdict(p) for p in points],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
