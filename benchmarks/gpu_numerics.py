"""How far do served answers sit from PyTorch? Max abs / max rel difference per model x format x
precision x numerics, measured with this package's own API. A measurement, not a test: every
figure is written down whether or not it passes, with the tolerance parity.py would apply.

    python benchmarks/gpu_numerics.py --models mnist,dlrm               # CPU, a quick look
    python benchmarks/gpu_numerics.py --gpu --out "$OUT"                # the GPU run (docs/gpu.md)
    python benchmarks/gpu_numerics.py --gpu --size full --models resnet50 --out "$OUT"

Per variant it records: one request of 4 rows against the reference (`single`); 8 single-row
requests sent together, which the dynamic batcher runs as one batch, each against the reference
on its row alone (`batched`); on a GPU in fp32, the same request against a CPU fp32 reference
(`vs_cpu_fp32`); and `drift`, the largest change of the answer to one request repeated
--repeats times (0 once the model is warm: TorchScript's profiling executor re-optimizes after
its first runs, which model_warmup is there to absorb). Both numerics modes are served from one
repository (exported once) by two servers: strict (NVIDIA_TF32_OVERRIDE=0) and production.
Writes gpu-numerics.json and gpu-numerics.md to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import TritonTestError
from pytest_triton.models import ZOO, zoo_spec
from pytest_triton.parity.compare import ParityReport, compare_outputs
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.variants import Variant
from pytest_triton.server import ServerArgs
from pytest_triton.server.choice import make_launcher
from pytest_triton.session.deployment import Deployment, ServedModel

FORMATS = ("torchscript-script", "torchscript-trace", "onnx")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", action="store_true", help="serve on the GPU (--triton-gpu)")
    parser.add_argument("--models", default=",".join(ZOO), help="zoo models, comma-separated")
    parser.add_argument("--size", choices=("small", "full"), default="small")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument(
        "--precisions", default=None, help="default: fp32,fp16 with --gpu, else fp32"
    )
    parser.add_argument(
        "--numerics",
        default=None,
        help="default: strict,production with --gpu, else strict (no TF32 on "
        "a CPU: both are the same there)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="model_warmup runs per sample (default: the setting's default)",
    )
    parser.add_argument("--protocol", choices=("http", "grpc"), default="grpc")
    parser.add_argument("--repeats", type=int, default=5, help="requests for the drift column")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-numerics-out")
    return parser.parse_args(argv)


def split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def worst(reports: list[ParityReport]) -> dict[str, Any]:
    """Largest max abs / max rel over every float output of every report; mismatches summed."""
    abs_, rel, bad, total, problems = 0.0, 0.0, 0, 0, []
    for report in reports:
        for diff in report.diffs:
            if diff.problem:
                problems.append(f"{diff.name}: {diff.problem}")
                continue
            abs_, rel = max(abs_, diff.max_abs), max(rel, diff.max_rel)
            bad, total = bad + diff.mismatched, total + diff.total
    tolerance = reports[0].diffs[0].tolerance if reports and reports[0].diffs else None
    return {
        "max_abs": abs_,
        "max_rel": rel,
        "mismatched": bad,
        "total": total,
        "ok": not problems and bad == 0,
        "problems": problems,
        "rtol": tolerance.rtol if tolerance else None,
        "atol": tolerance.atol if tolerance else None,
    }


def drift(answers: list[Mapping[str, np.ndarray]]) -> float:
    first = answers[0]
    return max(
        (
            float(np.max(np.abs(a[n].astype(np.float64) - first[n].astype(np.float64))))
            for a in answers[1:]
            for n in first
            if first[n].size
        ),
        default=0.0,
    )


def measure(
    served: ServedModel, deployment: Deployment, numerics: str, protocol: str, repeats: int
) -> dict[str, Any]:
    client = deployment.client(protocol)  # type: ignore[arg-type]
    kwargs = {"fmt": served.variant.format, "device": served.device, "numerics": numerics}
    inputs = served.inputs(4, seed=0)
    native = served.native(inputs)
    answers = [served.infer(client, inputs) for _ in range(max(repeats, 1))]
    row: dict[str, Any] = {
        "single": worst([compare_outputs(native, answers[0], **kwargs)]),
        "drift": drift(answers),
    }
    if served.variant.spec.batched:
        rows = served.inputs(8, seed=1)
        singles = [{n: a[i : i + 1] for n, a in rows.items()} for i in range(8)]
        got = served.infer_many(client, singles)
        row["batched"] = worst(
            [
                compare_outputs(served.native(s), g, **kwargs)
                for s, g in zip(singles, got, strict=True)
            ]
        )
    if served.variant.gpu and served.variant.precision == "fp32":
        cpu = NativeModel(served.variant.spec, "fp32", "cpu")
        row["vs_cpu_fp32"] = worst([compare_outputs(cpu(inputs), answers[0], **kwargs)])
    return row


def machine() -> dict[str, Any]:
    import onnxruntime
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
    return info


def fmt_num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else "0" if value == 0 else f"{value:.3g}"
    return str(value)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| model | format | precision | numerics | device | single max abs | single max rel "
        "| batched max abs | batched max rel | vs CPU fp32 max abs | drift | rtol / atol "
        "| parity |",
        "|---" * 13 + "|",
    ]
    for r in result["rows"]:
        if "skipped" in r:
            lines.append(
                f"| {r['id']} | | | {r['numerics']} | | skipped: {r['skipped']} |" + " |" * 7
            )
            continue
        if "error" in r:
            lines.append(
                f"| {r['model']} | {r['format']} | {r['precision']} | {r['numerics']} "
                f"| {r['device']} | error: {r['error'][:160]} |" + " |" * 7
            )
            continue
        single, batched, cpu = r["single"], r.get("batched") or {}, r.get("vs_cpu_fp32") or {}
        ok = single["ok"] and batched.get("ok", True)
        lines.append(
            f"| {r['model']} | {r['format']} | {r['precision']} | {r['numerics']} | {r['device']} "
            f"| {fmt_num(single['max_abs'])} | {fmt_num(single['max_rel'])} "
            f"| {fmt_num(batched.get('max_abs'))} | {fmt_num(batched.get('max_rel'))} "
            f"| {fmt_num(cpu.get('max_abs'))} | {fmt_num(r['drift'])} "
            f"| {fmt_num(single['rtol'])} / {fmt_num(single['atol'])} "
            f"| {'pass' if ok else 'FAIL'} |"
        )
    head = f"Machine: {json.dumps(result['machine'])}\n\nCommand: `{result['command']}`\n\n"
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    precisions = split(args.precisions or ("fp32,fp16" if args.gpu else "fp32"))
    modes = split(args.numerics or ("strict,production" if args.gpu else "strict"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = sys.stderr.write
    specs = [zoo_spec(name, args.size, instance_count=1) for name in split(args.models)]
    result: dict[str, Any] = {
        "command": " ".join(
            ["python benchmarks/gpu_numerics.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": machine(),
        "rows": [],
    }
    try:
        launchers = {mode: make_launcher(resolve(gpu=args.gpu, numerics=mode)) for mode in modes}
    except TritonTestError as exc:
        log(f"gpu_numerics: {exc}\n")
        return 2
    repo = Repository.create(
        specs,
        formats=split(args.formats),
        precisions=precisions,
        warmup=args.warmup,
        progress=lambda m: log(f"[repository] {m}\n"),
    )
    try:
        plan = repo.plan(launchers[modes[0]].target())
        for mode, launcher in launchers.items():
            started = time.perf_counter()
            deployment = Deployment(launcher.start(ServerArgs(repo.root)), repo)
            log(f"[{mode}] server ready in {time.perf_counter() - started:.1f}s\n")
            try:
                for skipped in repo.unavailable:
                    result["rows"].append(
                        {"id": skipped.id, "numerics": mode, "skipped": skipped.reason}
                    )
                for variant in plan:
                    result["rows"].append(run_variant(variant, deployment, mode, args, log))
            finally:
                deployment.close()
    finally:
        repo.remove()
    (out / "gpu-numerics.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "gpu-numerics.md").write_text(markdown(result))
    log(f"wrote {out / 'gpu-numerics.json'} and {out / 'gpu-numerics.md'}\n")
    sys.stdout.write(markdown(result))
    return 0


def run_variant(
    variant: Variant, deployment: Deployment, mode: str, args: argparse.Namespace, log: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model": variant.spec.name,
        "format": variant.format,
        "precision": variant.precision,
        "numerics": mode,
        "device": "gpu" if variant.gpu else "cpu",
        "id": variant.id,
        "warmup": variant.warmup,
    }
    started = time.perf_counter()
    try:
        served = deployment.model(variant)
        row.update(measure(served, deployment, mode, args.protocol, args.repeats))
        deployment.unload(variant)
    except (TritonTestError, AssertionError, ValueError, RuntimeError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    row["seconds"] = round(time.perf_counter() - started, 2)
    status = row.get("error") or (
        f"single {fmt_num(row['single']['max_abs'])}, drift {fmt_num(row['drift'])}"
    )
    log(f"[{mode}] {variant.id}: {status} ({row['seconds']}s)\n")
    return row


if __name__ == "__main__":
    sys.exit(main())
