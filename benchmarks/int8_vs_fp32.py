"""Is INT8 worth it here? The fp32 and INT8 ONNX variants of a zoo model served by the bundled
tritonserver side by side, at the same batch and concurrency: throughput and p99 of each, and
the INT8 variant's accuracy against fp32 PyTorch on a dataset. A benchmark, not a test.

Models: `digits` (the zoo's MNIST CNN trained on scikit-learn's digits, INT8 static QDQ
calibrated on 256 training digits; top-1 on the 360 held-out digits), `bert` (the zoo's
BERT small, INT8 dynamic; top-2 agreement of the start positions and span F1 with fp32
PyTorch on generated token batches: the zoo's BERT is untrained, so there are no labels) and
`dlrm` / `dlrm-full` (the zoo's DLRM, INT8 dynamic; ROC AUC on click logs drawn from its
fp32 weights, models/click_logs.py). `--int8 KEY=VALUE` declares how the INT8 variant is
quantized (`ModelSpec(int8=Int8(...))`: per_channel, weights_only, op_types=MatMul+Gemm).
Rounds alternate fp32 and INT8 so that drift hits both alike; medians are printed as a
markdown table (docs/accuracy.md), with the load average before and after each model.

    python benchmarks/int8_vs_fp32.py                                  # both, 5 s windows
    python benchmarks/int8_vs_fp32.py --model bert --concurrency 4 --duration 10 --repeat 3
    python benchmarks/int8_vs_fp32.py --model dlrm-full --batch 512 --concurrency 2 \
        --int8 per_channel=1 --int8 weights_only=1
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pytest_triton import Int8, ModelSpec, TritonClient
from pytest_triton.accuracy import metrics
from pytest_triton.accuracy.outcome import AccuracyResult
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.setting_sources import from_environ
from pytest_triton.models import bert, click_logs, digits, dlrm, mnist, zoo_spec
from pytest_triton.repository.builder import Repository
from pytest_triton.session.deployment import Deployment, ServedModel
from pytest_triton.session.lifecycle import start_deployment

MODELS = ("digits", "digits-full", "bert", "bert-base-128", "dlrm", "dlrm-full")


def int8_declared(pairs: list[str] | None) -> Int8:
    """--int8 KEY=VALUE pairs as the spec's Int8 declaration (1/0 for flags, + between names)."""
    fields: dict[str, Any] = {}
    for key, _, value in (p.partition("=") for p in pairs or []):
        if key in ("per_channel", "weights_only", "reduce_range"):
            fields[key] = value not in ("0", "false", "no")
        elif key == "fp32_head":
            fields[key] = int(value)
        elif key in ("op_types", "exclude_nodes"):
            fields[key] = tuple(v for v in value.split("+") if v)
        else:
            raise SystemExit(
                f"--int8 {key}: use per_channel, weights_only, reduce_range, op_types, "
                "fp32_head or exclude_nodes"
            )
    return Int8(**fields)


def spec_of(
    name: str, parameters: dict[str, str] | None = None, int8: Int8 | None = None
) -> ModelSpec:
    """digits: the small CNN; digits-full: the MNIST example's network (32/64/96 channels),
    both trained on the digits; bert: BERT small; bert-<size>: a larger BERT (base-128);
    dlrm, dlrm-full: the zoo's DLRM, small or full-size (Criteo-shaped, 293 MB of tables)."""
    extra: dict[str, Any] = {"parameters": parameters} if parameters else {}
    declared: Int8 | bool = int8 if int8 is not None else True
    if name in ("digits", "digits-full"):
        config = mnist.Config.full() if name == "digits-full" else digits.SMALL
        spec = digits.int8_spec(name.replace("-", "_"), config=config)
        return dataclasses.replace(spec, int8=declared, **extra)
    common: dict[str, Any] = {"int8": declared, "formats": ["onnx"], "instance_count": 1}
    if name in ("dlrm", "dlrm-full"):
        size = "full" if name == "dlrm-full" else "small"
        return zoo_spec("dlrm", size, model_name=name.replace("-", "_"), **common, **extra)
    if name == "bert":
        return zoo_spec("bert", "small", **common, **extra)
    config = bert.Config.by_name(name.removeprefix("bert-"))
    return zoo_spec("bert", config=config, model_name=name.replace("-", "_"), **common, **extra)


def accuracy(model: ServedModel, client: TritonClient, name: str) -> list[AccuracyResult]:
    """The INT8 variant's metrics against fp32 PyTorch (no rule: the figures only)."""
    rule: dict[str, Any] = {"min_ratio": None, "min_value": 0.0}
    if name.startswith("digits"):
        return [model.assert_accuracy(client, digits.load().batches(32), "top1", **rule)]
    if name.startswith("dlrm"):
        config = dlrm.Config.full() if name == "dlrm-full" else dlrm.Config.small()
        logs = click_logs.draw(config=config)
        return [model.assert_accuracy(client, logs.batches(256), "roc_auc", **rule)]
    batches = [model.inputs(8, seed) for seed in range(16)]
    return [
        model.assert_accuracy(client, batches, metrics.agreement(2, "start_logits"), **rule),
        model.assert_accuracy(client, batches, "span_f1", **rule),
    ]


def closed_loop(calls: list[Callable[[], Any]], warmup_s: float, duration_s: float) -> list[float]:
    """Each call in its own thread, back to back; the latencies of the window after warm-up."""
    start = time.perf_counter() + warmup_s
    end = start + duration_s
    sinks: list[list[float]] = [[] for _ in calls]

    def loop(call: Callable[[], Any], sink: list[float]) -> None:
        while (now := time.perf_counter()) < end:
            call()
            if now >= start:
                sink.append(time.perf_counter() - now)

    threads = [threading.Thread(target=loop, args=pair) for pair in zip(calls, sinks, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for sink in sinks for x in sink]


def measure(
    deployment: Deployment, model: ServedModel, args: argparse.Namespace
) -> tuple[float, float]:
    """(samples/s, p99 ms) of `concurrency` clients each sending its own prepared batch."""
    clients = [
        TritonClient(deployment.server.endpoints.url("http"), "http", timeout_s=300)
        for _ in range(args.concurrency)
    ]
    try:
        calls = []
        for i, client in enumerate(clients):
            request = client.prepare(
                model.name, model.inputs(args.batch, seed=i), model.variant.spec.output_names
            )
            calls.append(lambda c=client, r=request: c.send(r))
        window = closed_loop(calls, args.warmup, args.duration)
    finally:
        for client in clients:
            client.close()
    return len(window) * args.batch / args.duration, float(np.percentile(window, 99)) * 1e3


def run(name: str, args: argparse.Namespace) -> tuple[list[str], str]:
    """The model's two table rows, and a note of its INT8 declaration and the load average."""
    parameters = dict(p.split("=", 1) for p in args.parameter or [])
    spec = spec_of(name, parameters, int8_declared(args.int8))
    load_before = os.getloadavg()
    config = resolve(from_environ(os.environ, "pytest"), launcher="local", model_control="explicit")
    repo = Repository.create(
        [spec],
        formats=("onnx",),
        precisions=("fp32", "int8"),
        progress=lambda m: print(f"[int8-vs-fp32] {m}", file=sys.stderr),
    )
    deployment = None
    try:
        deployment = start_deployment(config, repo)
        served = {v.precision: deployment.model(v) for v in repo.variants}
        figures: dict[str, list[tuple[float, float]]] = {p: [] for p in served}
        for round_ in range(args.repeat):
            order = list(served.items())  # each precision first in every other round
            for precision, model in order[:: -1 if round_ % 2 else 1]:
                print(f"[int8-vs-fp32] {name} {precision} round {round_ + 1}", file=sys.stderr)
                figures[precision].append(measure(deployment, model, args))
                rate, p99 = figures[precision][-1]
                print(
                    f"[int8-vs-fp32]   {rate:.0f} samples/s, p99 {p99:.1f} ms, load average "
                    f"{os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                )
        checks = accuracy(served["int8"], deployment.client("http"), name)
    finally:
        if deployment is not None:
            deployment.close()
        repo.remove()
    rate = {p: statistics.median(r for r, _ in f) for p, f in figures.items()}
    p99 = {p: statistics.median(q for _, q in f) for p, f in figures.items()}
    note = (
        f"{name}: INT8 declared as {spec.int8!r}; 1-minute load average "
        f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    judged = "; ".join(
        f"{c.metric} {c.served:.4f} vs {c.reference:.4f} (ratio {c.ratio:.4f}, N={c.samples})"
        for c in checks
    )
    rows = [
        f"| {name} | {p} | {args.batch} | {args.concurrency} | {rate[p]:.0f} | {p99[p]:.1f} | "
        f"{rate[p] / rate['fp32']:.2f}x | {judged if p == 'int8' else 'reference'} |"
        for p in ("fp32", "int8")
    ]
    return rows, note


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=MODELS)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--parameter",
        action="append",
        metavar="KEY=VALUE",
        help="a config.pbtxt parameter of both variants (e.g. intra_op_threads=1)",
    )
    parser.add_argument(
        "--int8",
        action="append",
        metavar="KEY=VALUE",
        help="how the INT8 variant is quantized: per_channel=1, weights_only=1, reduce_range=1, "
        "op_types=MatMul+Gemm, fp32_head=1, exclude_nodes=NAME+NAME (ModelSpec(int8=Int8(...)))",
    )
    args = parser.parse_args()
    rows = [
        "| model | precision | batch | concurrency | samples/s | p99 ms | vs fp32 "
        "| accuracy vs fp32 PyTorch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for name in args.model or ["digits", "bert"]:
        model_rows, note = run(name, args)
        rows += model_rows
        notes.append(note)
    print("\n".join([*rows, "", *notes]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
