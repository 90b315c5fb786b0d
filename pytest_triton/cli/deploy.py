"""`triton-deploy`: NVIDIA's deployer.py flags, on top of the repository builder.

    triton-deploy --onnx --triton-model-name dlrm-onnx --triton-max-batch-size 4096 \\
        --save-dir model_repository -- --embedding_dim 16 --bottom_mlp_sizes 32 16 \\
        --top_mlp_sizes 64 32 1

Deployer flags come first; the model's own arguments (the examples' DLRM, ResNeXt, BERT
flags) follow `--`. It prints where it wrote what, and `--check` loads the result in a
local tritonserver and compares its answer with PyTorch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pytest_triton.base.config import TritonConfig, settings_for
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import TritonTestError
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.base.setting_sources import add_arguments, check_environ, from_arguments
from pytest_triton.base.version import __version__
from pytest_triton.models import bert, dlrm, mnist, resnext, text_recognition
from pytest_triton.models.specs import zoo_spec
from pytest_triton.repository import pbtxt
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.spec import DynamicBatching, ModelSpec
from pytest_triton.repository.variants import ARTIFACT, NATIVE_BACKEND, Variant

FORMAT_FLAGS = {
    "ts_script": "torchscript-script",
    "ts_trace": "torchscript-trace",
    "onnx": "onnx",
    "trt": "tensorrt",
    "torch_export": "torch-export",
    "aoti": "aoti",
}
FAMILIES = ("dlrm", "resnext", "bert", "mnist", "text_recognition")


class UsageError(TritonTestError):
    """A flag combination triton-deploy cannot honour; the message says which and why."""


def deployer_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a setting another front end takes is refused, never abbreviated
        prog="triton-deploy",
        description="Export a zoo model and write a Triton model repository entry "
        "(flags of NVIDIA's deployer.py). Model arguments follow '--'.",
        epilog="example: triton-deploy --onnx --triton-model-name dlrm-onnx "
        "--triton-max-batch-size 4096 --save-dir repo -- --embedding_dim 16 "
        "--bottom_mlp_sizes 32 16 --top_mlp_sizes 64 32 1",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )  # the package's version (pyproject.toml, through importlib.metadata)
    fmt = parser.add_mutually_exclusive_group()  # required unless --spec (deploy() says so)
    fmt.add_argument("--ts-script", action="store_true", help="TorchScript via torch.jit.script")
    fmt.add_argument("--ts-trace", action="store_true", help="TorchScript via torch.jit.trace")
    fmt.add_argument("--onnx", action="store_true", help="ONNX via torch.onnx (dynamo)")
    fmt.add_argument("--trt", action="store_true", help="TensorRT plan (needs a GPU + tensorrt)")
    fmt.add_argument(
        "--torch-export",
        action="store_true",
        help="torch.export's ExportedProgram (.pt2), python-hosted",
    )
    fmt.add_argument(
        "--aoti",
        action="store_true",
        help="AOTInductor package (.pt2) compiled for this machine's device, python-hosted "
        "(a CPU compile needs a C++ compiler)",
    )
    triton = parser.add_argument_group("triton related flags")
    triton.add_argument(
        "--spec",
        metavar="MODULE:CALLABLE",
        help="deploy a spec of your own instead of a zoo model: a SequenceSpec (a stateful "
        "model behind the sequence batcher; --ts-script or --ts-trace picks its export) or a "
        "PipelineSpec (each step exported as its own model, the ensemble / BLS front models); "
        "--check then sends interleaved sequences, or checks the pipeline against its steps "
        "composed in PyTorch",
    )
    triton.add_argument(
        "--model",
        choices=FAMILIES,
        help="which model (default: guessed from the model arguments or name)",
    )
    triton.add_argument(
        "--triton-no-cuda",
        action="store_true",
        help="trace on the CPU and "
        "write KIND_CPU instances (automatic when no CUDA device is present)",
    )
    triton.add_argument("--triton-model-name", help="model directory name (default: the model)")
    triton.add_argument("--triton-model-version", type=int, default=1)
    triton.add_argument(
        "--triton-max-batch-size",
        type=int,
        help="max_batch_size (default: the example's recommendation)",
    )
    triton.add_argument(
        "--triton-dyn-batching-delay",
        type=float,
        help="dynamic batching queue delay in ms; 0 or -1 = static batching "
        "(default: the example's recommendation)",
    )
    triton.add_argument("--triton-engine-count", type=int, help="instance_group count")
    triton.add_argument(
        "--save-dir",
        type=Path,
        default=Path("model_repository"),
        help="model repository directory (default: model_repository)",
    )
    triton.add_argument("--trt-fp16", action="store_true", help="fp16 TensorRT plan")
    triton.add_argument(
        "--int8",
        action="store_true",
        help="INT8 ONNX (--onnx only) through onnxruntime.quantization: static QDQ calibrated "
        "on --calibration-data for models with convolutions, dynamic otherwise; --check then "
        "judges it by accuracy (cosine of every output with fp32 PyTorch), not element-wise",
    )
    triton.add_argument(
        "--calibration-data",
        type=Path,
        metavar="FILE.npz",
        help="with --int8: real input batches to calibrate on, an .npz of arrays by input "
        "name (batch axis first), split into batches of --batch_size (default: generated "
        "batches, which a CNN should not be calibrated on)",
    )
    backend = triton.add_mutually_exclusive_group()
    backend.add_argument(
        "--native",
        action="store_true",
        help="write a native backend config (onnxruntime_onnx, "
        "pytorch_libtorch, tensorrt_plan) even if the local "
        "tritonserver lacks that backend",
    )
    backend.add_argument(
        "--hosted", action="store_true", help="write a python-backend model hosting the artifact"
    )
    triton.add_argument(
        "--config-only",
        action="store_true",
        help="write config.pbtxt only (no export; shapes from the meta device)",
    )
    triton.add_argument(
        "--dump-perf-data",
        type=Path,
        metavar="DIR",
        help="write perf_analyzer --input-data JSON into DIR",
    )
    triton.add_argument(
        "--check",
        action="store_true",
        help="load the result in a local tritonserver and compare with PyTorch",
    )
    add_arguments(parser.add_argument_group("server for --check"), "deploy")
    return parser


def model_parser(family: str) -> argparse.ArgumentParser:
    """The examples' model arguments, per model family."""
    p = argparse.ArgumentParser(prog=f"triton-deploy ... -- ({family} arguments)")
    p.add_argument(
        "--batch_size", type=int, default=4, help="example/perf-data batch size (default 4)"
    )
    p.add_argument("--fp16", action="store_true", help="deploy the half-precision model")
    p.add_argument(
        "--small",
        action="store_true",
        help="the small configuration (same layers, fewer channels/rows)",
    )
    p.add_argument("--dump_perf_data", type=Path, help="alias of --dump-perf-data")
    if family == "dlrm":
        full = dlrm.Config.full()
        p.add_argument("--num_numerical_features", type=int, default=full.num_numerical_features)
        p.add_argument("--embedding_dim", type=int)
        p.add_argument("--top_mlp_sizes", type=int, nargs="+")
        p.add_argument("--bottom_mlp_sizes", type=int, nargs="+")
        p.add_argument("--interaction_op", choices=("cat", "dot"), default="dot")
        p.add_argument("--self_interaction", action="store_true")
        p.add_argument("--hash_indices", action="store_true")
        p.add_argument("--dataset", type=Path, help="directory with model_size.json")
        p.add_argument("--model_checkpoint", type=Path)
        p.add_argument("--cpu", action="store_true", help="export a CPU model")
    else:
        p.add_argument("--checkpoint", type=Path)
    if family == "resnext":
        p.add_argument("--config", choices=resnext.ARCHITECTURES, default="resnext101-32x4d")
    if family == "bert":
        p.add_argument("--bert_model", choices=("large", "base"), default="large")
        p.add_argument("--seq_length", type=int, default=384)
    return p


DLRM_FLAGS = {
    "--num_numerical_features",
    "--embedding_dim",
    "--top_mlp_sizes",
    "--bottom_mlp_sizes",
    "--interaction_op",
    "--self_interaction",
    "--hash_indices",
    "--dataset",
    "--model_checkpoint",
}


def guess_family(explicit: str | None, model_args: Sequence[str], name: str | None) -> str:
    if explicit:
        return explicit
    flags = {a.split("=")[0] for a in model_args if a.startswith("--")}
    if flags & DLRM_FLAGS:
        return "dlrm"
    if "--config" in flags:
        return "resnext"
    if flags & {"--bert_model", "--seq_length"}:
        return "bert"
    lowered = (name or "").lower()
    for family, keys in (
        ("dlrm", ("dlrm",)),
        ("bert", ("bert",)),
        ("mnist", ("mnist",)),
        ("text_recognition", ("text", "str")),
        ("resnext", ("rnxt", "resnext", "resnet")),
    ):
        if any(k in lowered for k in keys):
            return family
    raise UsageError(
        "cannot tell which model to deploy: pass --model "
        f"{{{','.join(FAMILIES)}}} or zoo model arguments after '--'"
    )


@dataclass
class Deployment:
    zoo: str
    config: Any
    checkpoint: Path | None
    fp16: bool
    batch_size: int
    cpu: bool


def deployer_settings(family: str, args: argparse.Namespace) -> Deployment:
    """The zoo name and model Config the model arguments describe."""
    size_full = not args.small
    checkpoint = getattr(args, "checkpoint", None) or getattr(args, "model_checkpoint", None)
    if family == "dlrm":
        base = dlrm.Config.full() if size_full else dlrm.Config.small()
        changes: dict[str, Any] = {
            "num_numerical_features": args.num_numerical_features,
            "interaction_op": args.interaction_op,
            "self_interaction": args.self_interaction,
            "hash_indices": args.hash_indices or base.hash_indices,
        }
        if args.embedding_dim:
            changes["embedding_dim"] = args.embedding_dim
        if args.top_mlp_sizes:
            changes["top_mlp_sizes"] = tuple(args.top_mlp_sizes)
        if args.bottom_mlp_sizes:
            changes["bottom_mlp_sizes"] = tuple(args.bottom_mlp_sizes)
        if args.dataset:
            sizes = args.dataset / "model_size.json"
            if not sizes.is_file():
                raise UsageError(f"--dataset {args.dataset}: no model_size.json in it")
            config: Any = dlrm.Config.from_model_size(sizes, **changes)
        else:
            try:
                config = base.with_(**changes)
            except ValueError as exc:
                raise UsageError(f"DLRM arguments: {exc}") from None
        return Deployment("dlrm", config, checkpoint, args.fp16, args.batch_size, args.cpu)
    cfg: Any
    zoo = family
    if family == "resnext":
        zoo = args.config
        cfg = resnext.Config.full(args.config) if size_full else resnext.Config.small(args.config)
    elif family == "bert":
        if not size_full:
            cfg = bert.Config.small()
        elif args.bert_model == "large":
            cfg = bert.Config.full(args.seq_length)
        else:
            cfg = bert.Config.base(args.seq_length)
    else:
        module: Any = mnist if family == "mnist" else text_recognition
        cfg = module.Config.full() if size_full else module.Config.small()
    return Deployment(zoo, cfg, checkpoint, args.fp16, args.batch_size, False)


def _local_backends() -> frozenset[str]:
    from pytest_triton.server.local import find_installation

    try:
        return find_installation().backends
    except TritonTestError:
        return frozenset()


def choose_target(fmt: str, args: argparse.Namespace, gpu: bool) -> tuple[ServerTarget, str]:
    """Native or python-hosted config, and why (printed for the user)."""
    native_backend = NATIVE_BACKEND[fmt][0]
    kind = "KIND_GPU" if gpu else "KIND_CPU"
    if args.native or fmt == "tensorrt":
        return (
            ServerTarget(frozenset({native_backend}), kind, tensorrt_problem=None),
            f"native {native_backend} backend",
        )
    local = _local_backends()
    if args.hosted or native_backend not in local:
        reason = (
            "as --hosted asked"
            if args.hosted
            else f"the local tritonserver has no {native_backend} backend; pass --native to "
            "write a config for an NGC server"
        )
        return (
            ServerTarget(frozenset({"python"}), kind),
            f"python backend hosting {ARTIFACT[fmt]}: {reason}",
        )
    return ServerTarget(local, kind), f"native {native_backend} backend"


def perf_data(spec: ModelSpec, batch_size: int, directory: Path, precision: str) -> Path:
    """perf_analyzer --input-data JSON: one entry per sample, shapes without the batch axis."""
    directory.mkdir(parents=True, exist_ok=True)
    batch = spec.make_inputs(batch_size, seed=0)
    entries = []
    for row in range(batch_size):
        entry = {}
        for name, array in batch.items():
            sample = array[row] if spec.batched else array
            if precision == "fp16" and np.issubdtype(sample.dtype, np.floating):
                sample = sample.astype(np.float16)
            entry[name] = {"content": sample.reshape(-1).tolist(), "shape": list(sample.shape)}
        entries.append(entry)
    path = directory / f"{spec.triton_name or spec.name}.json"
    path.write_text(json.dumps({"data": entries}))
    return path


def deploy(argv: Sequence[str], out: Any = sys.stdout) -> int:
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = deployer_parser().parse_args(argv[:split])
    model_argv = argv[split + 1 :]
    if args.spec:
        return deploy_spec(args, model_argv, out)
    if not any(getattr(args, k) for k in FORMAT_FLAGS):
        raise UsageError(
            "one of --ts-script, --ts-trace, --onnx, --trt, --torch-export, --aoti is "
            "required (or --spec "
            "MODULE:CALLABLE for a SequenceSpec or PipelineSpec)"
        )
    family = guess_family(args.model, model_argv, args.triton_model_name)
    margs = model_parser(family).parse_args(model_argv)
    chosen = deployer_settings(family, margs)
    fmt = next(FORMAT_FLAGS[k] for k in FORMAT_FLAGS if getattr(args, k))
    if args.trt_fp16 and fmt != "tensorrt":
        raise UsageError(
            f"--trt-fp16 applies to --trt only; use --fp16 after '--' for an fp16 {fmt} model"
        )
    fp16 = chosen.fp16 or args.trt_fp16
    if args.calibration_data and not args.int8:
        raise UsageError("--calibration-data calibrates an --int8 model: add --int8")
    if args.int8 and (fmt != "onnx" or fp16):
        raise UsageError(
            "--int8 applies to --onnx in fp32 only (onnxruntime.quantization quantizes the "
            "fp32 ONNX export)"
        )
    cuda = torch.cuda.is_available()
    gpu = not (args.triton_no_cuda or chosen.cpu) and cuda
    if not gpu and not (args.triton_no_cuda or chosen.cpu):
        print(
            "no CUDA device: tracing on the CPU and writing KIND_CPU instances "
            "(as --triton-no-cuda)",
            file=out,
        )
    if fmt == "tensorrt" and not gpu:
        raise UsageError(
            "--trt builds a TensorRT plan on a GPU: this machine has no CUDA "
            "device (or --triton-no-cuda was given); use --onnx or --ts-trace"
        )
    if fp16 and not gpu and fmt == "tensorrt":
        raise UsageError("fp16 TensorRT plans need a GPU")
    delay = args.triton_dyn_batching_delay
    overrides: dict[str, Any] = {
        "formats": [fmt],
        "fp16": fp16,
        "int8": args.int8,
        "calibration": calibration_from_file(args.calibration_data, chosen.batch_size),
        "triton_name": args.triton_model_name or chosen.zoo,
        "version": args.triton_model_version,
        "instance_kind": "KIND_GPU" if gpu else "KIND_CPU",
    }
    if args.triton_max_batch_size is not None:
        overrides["max_batch_size"] = args.triton_max_batch_size
    if delay is not None:
        overrides["dynamic_batching"] = None if delay <= 0 else DynamicBatching(round(delay * 1000))
    if args.triton_engine_count is not None:
        overrides["instance_count"] = args.triton_engine_count
    example_batch = max(2, min(chosen.batch_size, overrides.get("max_batch_size") or 1 << 30))
    spec = zoo_spec(
        chosen.zoo,
        config=chosen.config,
        checkpoint=str(chosen.checkpoint) if chosen.checkpoint else None,
        example_batch=example_batch,
        **overrides,
    )
    if fp16 and not spec.fp16:
        raise UsageError(f"--fp16 is not supported for {fmt}")
    target, why = choose_target(fmt, args, gpu)
    repo = Repository(
        args.save_dir, [spec], formats=[fmt], progress=lambda msg: print(msg, file=out)
    )
    precision = "int8" if args.int8 else ("fp16" if fp16 else "fp32")
    variants = [v for v in repo.plan(target) if v.precision == precision]
    if not variants:
        raise UsageError(f"{fmt} cannot be written for this target")
    (variant,) = variants
    directory = repo.model_dir(variant)
    if args.config_only:
        directory.mkdir(parents=True, exist_ok=True)
        path = pbtxt.write_config(directory, repo.config(variant))
        print(f"wrote {path} ({why})", file=out)
    else:
        started = time.perf_counter()
        repo.ensure(variant)
        print(f"wrote {directory / 'config.pbtxt'} ({why})", file=out)
        for file in sorted((directory / str(variant.spec.version)).iterdir()):
            print(f"wrote {file} ({file.stat().st_size / 1e6:.1f} MB)", file=out)
        print(f"exported in {time.perf_counter() - started:.1f}s", file=out)
    dump = args.dump_perf_data or margs.dump_perf_data
    if dump:
        path = perf_data(spec, chosen.batch_size, dump, variant.precision)
        print(
            f"wrote {path}: perf_analyzer -m {variant.model_name} --input-data {path} "
            f"-b {chosen.batch_size}",
            file=out,
        )
    if args.check:
        check_environ(os.environ, "deploy")
        return check(resolve(from_arguments(args, "deploy")), repo, variant, out)
    return 0


SPEC_ONLY_FLAGS = ("save_dir", "check", "triton_no_cuda", "ts_script", "ts_trace", "spec")
"""What --spec takes of the deployer's own flags (the zoo's flags describe a zoo model)."""


def deploy_spec(args: argparse.Namespace, model_argv: Sequence[str], out: Any) -> int:
    """--spec MODULE:CALLABLE: a SequenceSpec or PipelineSpec written into --save-dir (and
    checked on a local server with --check)."""
    from pytest_triton.base.importing import load_object
    from pytest_triton.repository.pipeline import PipelineSpec
    from pytest_triton.repository.sequence import SequenceSpec
    from pytest_triton.session import deploy_kinds

    if model_argv:
        raise UsageError(
            f"--spec {args.spec} takes no model arguments after '--' (got "
            f"{' '.join(model_argv)}): the spec says what the model is"
        )
    defaults = deployer_parser().parse_args(["--spec", args.spec])
    taken = {*SPEC_ONLY_FLAGS, *(s.dest for s in settings_for("deploy"))}  # --check's server
    extra = sorted(
        "--" + k.replace("_", "-")
        for k, v in vars(args).items()
        if k not in taken and v != getattr(defaults, k)
    )
    if extra:
        raise UsageError(
            f"{', '.join(extra)}: not taken with --spec, whose spec says how its models are "
            "served; set it in the spec"
        )
    made = load_object(args.spec)()

    def say(message: str) -> None:
        print(message, file=out)

    if isinstance(made, SequenceSpec):
        if args.ts_script or args.ts_trace:
            made = dataclasses.replace(
                made, fmt="torchscript-script" if args.ts_script else "torchscript-trace"
            )
        deploy_kinds.write_sequence(made, args.save_dir, say)
        if args.check:
            check_environ(os.environ, "deploy")
            deploy_kinds.check_sequence(
                resolve(from_arguments(args, "deploy")), made, args.save_dir, say
            )
        return 0
    if isinstance(made, PipelineSpec):
        if args.ts_script or args.ts_trace:
            raise UsageError(
                f"--spec {args.spec} is a pipeline: each step's format is the spec's "
                "(PipelineSpec.step_format or the step's own), not a deployer flag"
            )
        repo = deploy_kinds.write_pipeline(
            made, args.save_dir, ServerTarget(_local_backends() or frozenset({"python"})), say
        )
        if args.check:
            check_environ(os.environ, "deploy")
            deploy_kinds.check_pipeline(resolve(from_arguments(args, "deploy")), made, repo, say)
        return 0
    raise UsageError(
        f"--spec {args.spec} returned {type(made).__name__}: it must return a SequenceSpec or "
        "a PipelineSpec (a zoo model is deployed with --model and its arguments after '--')"
    )


def calibration_from_file(
    path: Path | None, batch_size: int
) -> Callable[[], list[dict[str, Array]]] | None:
    """--calibration-data's arrays, split into batches (read when the export needs them)."""
    if path is None:
        return None
    if not path.is_file():
        raise UsageError(f"--calibration-data {path}: no such file")

    def batches() -> list[dict[str, Array]]:
        with np.load(path) as data:
            arrays = {name: data[name] for name in data.files}
        rows = min(len(a) for a in arrays.values())
        return [
            {name: a[i : i + batch_size] for name, a in arrays.items()}
            for i in range(0, rows, batch_size)
        ]

    return batches


INT8_CHECK_BATCHES = 16  # x 8 rows: 128 samples, more than a 99% rule needs at 1.0


def check(config: TritonConfig, repo: Repository, variant: Variant, out: Any) -> int:
    """Serve the written repository from a local tritonserver and compare with PyTorch:
    element-wise, or for an INT8 model by the cosine of each output with fp32 PyTorch's."""
    from pytest_triton.accuracy import metrics
    from pytest_triton.session.lifecycle import start_deployment

    deployment = start_deployment(config, repo)
    try:
        model = deployment.model(variant)
        for protocol in ("http", "grpc"):
            client = deployment.client(protocol)
            if variant.precision == "int8":
                batches = [model.inputs(8, seed) for seed in range(INT8_CHECK_BATCHES)]
                for output in variant.spec.output_names:
                    result = model.assert_accuracy(client, batches, metrics.cosine(output))
                    print(f"check {protocol}: {result.describe()}", file=out)
                continue
            report = model.assert_parity(client, batch_size=2)
            print(f"check {protocol}: " + report.describe().replace("\n", "\n  "), file=out)
    finally:
        deployment.close()
    return 0


def deploy_main(argv: Sequence[str] | None = None) -> int:
    try:
        return deploy(sys.argv[1:] if argv is None else argv)
    except (TritonTestError, AssertionError) as exc:
        print(f"triton-deploy: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(deploy_main())
