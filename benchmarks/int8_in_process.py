"""Where does INT8 win, before Triton is in the way? The fp32 and INT8 ONNX exports of a zoo
model run by onnxruntime in this process, at a few batch sizes and session settings, and the
INT8 model quantized a few ways (the project's own, QOperator, reduce_range, MatMul/Gemm only).
A benchmark, not a test: medians of back-to-back runs, printed as a markdown table.

    python benchmarks/int8_in_process.py --model digits --model bert --batch 8 --batch 32
    python benchmarks/int8_in_process.py --model digits-full --threads 1 --threads 2
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from int8_vs_fp32 import spec_of  # type: ignore[import-not-found]

from pytest_triton import ModelSpec
from pytest_triton.repository import quantization
from pytest_triton.repository.builder import Repository

Feeds = dict[str, np.ndarray[Any, Any]]


def exports(spec: ModelSpec, into: Path) -> dict[str, Path]:
    """The project's fp32 and INT8 ONNX artifacts (from the export cache where one is set)."""
    repo = Repository.create([spec], formats=("onnx",), precisions=("fp32", "int8"))
    try:
        found = {}
        for variant in repo.plan(["python"]):
            directory = repo.ensure(variant)
            target = into / variant.precision  # with the weights' external data file, if any
            shutil.copytree(directory / "1", target)
            found[variant.precision] = target / variant.artifact
        return found
    finally:
        repo.remove()


def alternatives(spec: ModelSpec, fp32: Path, into: Path) -> dict[str, Path]:
    """INT8 models quantized other ways than the project's default, for comparison."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic

    out: dict[str, Path] = {}
    if quantization.uses_convolutions(fp32):
        for label, fmt in (("qoperator", QuantFormat.QOperator),):
            path = into / f"int8-{label}.onnx"
            quantization.quantize_static_with(spec, fp32, path, quant_format=fmt)
            out[label] = path
        path = into / "int8-reduce-range.onnx"
        quantization.quantize_static_with(spec, fp32, path, reduce_range=True)
        out["reduce_range"] = path
        return out
    for label, kwargs in (
        ("matmul-only", {"op_types_to_quantize": ["MatMul", "Gemm"]}),
        ("per-channel", {"per_channel": True}),
        ("reduce-range", {"reduce_range": True}),
        ("uint8-weights", {"weight_type": QuantType.QUInt8}),
    ):
        path = into / f"int8-{label}.onnx"
        options: dict[str, Any] = {"weight_type": QuantType.QInt8, **kwargs}
        quantize_dynamic(str(fp32), str(path), **options)
        out[label] = path
    del QuantFormat
    return out


def session(path: Path, threads: int, spinning: bool) -> Callable[[Feeds], Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def timed(run: Callable[[Feeds], Any], feeds: Feeds, seconds: float) -> float:
    """Median seconds per call over `seconds` of back-to-back calls (after 3 warm-up calls)."""
    for _ in range(3):
        run(feeds)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        began = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append")
    parser.add_argument("--batch", action="append", type=int)
    parser.add_argument("--threads", action="append", type=int)
    parser.add_argument("--spinning", action="append", choices=("on", "off"))
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--alternatives", action="store_true")
    args = parser.parse_args()
    rows = [
        "| model | batch | threads | spinning | int8 kind | fp32 ms | int8 ms | int8 speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in args.model or ["digits", "bert"]:
        spec = spec_of(name)
        with tempfile.TemporaryDirectory(prefix="int8-probe-") as tmp:
            paths = exports(spec, Path(tmp))
            kinds = {"project": paths["int8"]}
            if args.alternatives:
                kinds.update(alternatives(spec, paths["fp32"], Path(tmp)))
            for batch in args.batch or [8, 32]:
                feeds = {k: np.asarray(v) for k, v in spec.make_inputs(batch, 0).items()}
                for threads in args.threads or [1, 2]:
                    for spin in args.spinning or ["on"]:
                        on = spin == "on"
                        fp32 = timed(session(paths["fp32"], threads, on), feeds, args.seconds)
                        for kind, path in kinds.items():
                            int8 = timed(session(path, threads, on), feeds, args.seconds)
                            rows.append(
                                f"| {name} | {batch} | {threads} | {spin} | {kind} | "
                                f"{fp32 * 1e3:.3f} | {int8 * 1e3:.3f} | {fp32 / int8:.2f}x |"
                            )
                            print(rows[-1], file=sys.stderr, flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
