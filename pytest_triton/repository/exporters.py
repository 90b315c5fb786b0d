"""Exports a spec's module to the artifact a Triton backend loads (TorchScript or ONNX)."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from pytest_triton.base.errors import ExportError
from pytest_triton.repository.quantization import quantize
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.signature import Signature
from pytest_triton.repository.spec import ModelSpec


def _example_args(spec: ModelSpec, native: NativeModel) -> tuple[torch.Tensor, ...]:
    examples = {n: t.detach().cpu().numpy() for n, t in spec.example_tensors().items()}
    cast = native.cast_inputs(examples)
    return tuple(torch.from_numpy(cast[n]).to(native.device) for n in spec.input_names)


def export_torchscript_script(
    spec: ModelSpec, native: NativeModel, path: Path, signature: Signature
) -> None:
    scripted = torch.jit.script(native.module)
    torch.jit.save(scripted, str(path))


def export_torchscript_trace(
    spec: ModelSpec, native: NativeModel, path: Path, signature: Signature
) -> None:
    traced = torch.jit.trace(native.module, _example_args(spec, native), check_trace=False)
    torch.jit.save(traced, str(path))


def export_onnx(spec: ModelSpec, native: NativeModel, path: Path, signature: Signature) -> None:
    """torch.onnx's dynamo exporter, with the batch axis and declared axes dynamic."""
    dynamic_shapes = []
    for tensor in signature.inputs:
        axes: dict[int, torch.export.Dim] = {}
        offset = 1 if spec.batched else 0
        if spec.batched:
            axes[0] = torch.export.Dim("batch", min=1, max=max(spec.max_batch_size, 2))
        for i, d in enumerate(tensor.dims):
            if d == -1:
                axes[i + offset] = torch.export.Dim.AUTO
        dynamic_shapes.append(axes)
    torch.onnx.export(
        native.module,
        _example_args(spec, native),
        str(path),
        dynamo=True,
        input_names=spec.input_names,
        output_names=spec.output_names,
        dynamic_shapes=tuple(dynamic_shapes),
        verbose=False,
    )


def export_tensorrt(
    spec: ModelSpec, native: NativeModel, path: Path, signature: Signature, *, tf32: bool = True
) -> None:
    """ONNX export, then a TensorRT engine built on this machine's GPU with an optimization
    profile over batch 1..max_batch_size (declared dynamic axes: 1..their example size).
    `tf32` False (strict numerics) clears the builder's TF32 flag, which TensorRT sets by
    default: a plan's precision is fixed when it is built, not by the server's environment."""
    import tensorrt as trt

    with tempfile.TemporaryDirectory(prefix="pytest-triton-trt-") as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        export_onnx(spec, native, onnx_path, signature)
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT could not parse the ONNX export: {errors}")
        config = builder.create_builder_config()
        if native.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        if not tf32:
            config.clear_flag(trt.BuilderFlag.TF32)
        profile = builder.create_optimization_profile()
        examples = spec.example_tensors()
        for tensor in signature.inputs:
            shape = tuple(examples[tensor.name].shape)
            low = [
                1 if (spec.batched and i == 0) or d == -1 else shape[i]
                for i, d in enumerate(((-1,) if spec.batched else ()) + tensor.dims)
            ]
            high = [
                spec.max_batch_size if (spec.batched and i == 0) else shape[i]
                for i in range(len(shape))
            ]
            profile.set_shape(tensor.name, low, list(shape), high)
        config.add_optimization_profile(profile)
        engine = builder.build_serialized_network(network, config)
        if engine is None:
            raise RuntimeError("TensorRT failed to build the engine (see its log above)")
        path.write_bytes(bytes(engine))


def export_onnx_int8(
    spec: ModelSpec, native: NativeModel, path: Path, signature: Signature
) -> None:
    """The fp32 ONNX export, quantized to INT8 (quantization.py)."""
    with tempfile.TemporaryDirectory(prefix="pytest-triton-int8-") as tmp:
        fp32 = Path(tmp) / "model.onnx"
        export_onnx(spec, native, fp32, signature)
        quantize(spec, fp32, path)


EXPORTERS: dict[str, Callable[[ModelSpec, NativeModel, Path, Signature], None]] = {
    "torchscript-script": export_torchscript_script,
    "torchscript-trace": export_torchscript_trace,
    "onnx": export_onnx,
    "onnx-trt": export_onnx,
    "tensorrt": export_tensorrt,
}


def export(
    fmt: str,
    spec: ModelSpec,
    native: NativeModel,
    path: Path,
    signature: Signature,
    *,
    numerics: str = "strict",
) -> None:
    """Run one exporter, turning its failure into an ExportError with the exporter's output."""
    exporter = EXPORTERS.get(fmt)
    if exporter is None:
        raise ExportError(f"no exporter for format {fmt!r} on this machine")
    if fmt == "tensorrt":
        exporter = functools.partial(export_tensorrt, tf32=numerics != "strict")
    if native.precision == "int8":
        if fmt != "onnx":
            raise ExportError(f"int8 is exported as ONNX only, not as {fmt!r}")
        exporter = export_onnx_int8
    path.parent.mkdir(parents=True, exist_ok=True)
    chatter = io.StringIO()
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    try:
        quiet.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(chatter), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exporter(spec, native, path, signature)
    except Exception as exc:  # exporters raise anything; keep their message, name the variant
        raise ExportError(
            f"exporting model {spec.name!r} as {fmt} ({native.precision}) failed: "
            f"{type(exc).__name__}: {exc}\n{chatter.getvalue()[-4000:]}"
        ) from exc
    finally:
        quiet.setLevel(level)
