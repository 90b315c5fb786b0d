"""Exports a spec's module to the artifact a Triton backend loads (TorchScript, ONNX,
torch.export's .pt2 or an AOTInductor package)."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pytest_triton.base.config import Numerics
from pytest_triton.base.errors import ExportError
from pytest_triton.repository import torch_compat, torchscript_notice
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


def _dynamic_shapes(spec: ModelSpec, signature: Signature) -> tuple[dict[int, Any], ...]:
    """torch.export's dynamic_shapes: the batch axis (1..max_batch_size) and declared axes."""
    dynamic_shapes = []
    for tensor in signature.inputs:
        axes: dict[int, Any] = {}
        offset = 1 if spec.batched else 0
        if spec.batched:
            axes[0] = torch.export.Dim("batch", min=1, max=max(spec.max_batch_size, 2))
        for i, d in enumerate(tensor.dims):
            if d == -1:
                axes[i + offset] = torch.export.Dim.AUTO
        dynamic_shapes.append(axes)
    return tuple(dynamic_shapes)


def export_onnx(spec: ModelSpec, native: NativeModel, path: Path, signature: Signature) -> None:
    """torch.onnx's dynamo exporter, with the batch axis and declared axes dynamic."""
    torch.onnx.export(
        native.module,
        _example_args(spec, native),
        str(path),
        dynamo=True,
        input_names=spec.input_names,
        output_names=spec.output_names,
        dynamic_shapes=_dynamic_shapes(spec, signature),
        verbose=False,
    )


def exported_program(
    spec: ModelSpec, native: NativeModel, signature: Signature
) -> torch.export.ExportedProgram:
    """torch.export's graph of the module, batch axis dynamic as for ONNX; a module it cannot
    capture is refused naming the formats that do not go through torch.export."""
    try:
        return torch.export.export(
            native.module,
            _example_args(spec, native),
            dynamic_shapes=_dynamic_shapes(spec, signature),
        )
    except Exception as exc:  # torch.export raises many types; its reason is kept whole
        raise Uncapturable(
            f"torch.export cannot capture model {spec.name!r}: {type(exc).__name__}: "
            f"{_first_lines(str(exc))}; formats that do not go through torch.export: "
            f"{', '.join(WITHOUT_TORCH_EXPORT)} (ONNX's dynamo exporter uses torch.export "
            "too). Serve it in those, or make forward traceable (torch.cond for a branch on "
            "data)"
        ) from exc


def export_torch_export(
    spec: ModelSpec, native: NativeModel, path: Path, signature: Signature
) -> None:
    """The ExportedProgram itself, as torch.export.save writes it (.pt2)."""
    torch.export.save(exported_program(spec, native, signature), str(path))


def export_aoti(spec: ModelSpec, native: NativeModel, path: Path, signature: Signature) -> None:
    """The ExportedProgram compiled by AOTInductor for the reference's device (the server's),
    packaged as .pt2. On a CPU it needs a C++ compiler: checked first, with what to install."""
    if native.device.type == "cpu":
        problem = torch_compat.cxx_problem()
        if problem is not None:
            raise NoCompiler(
                f"AOTInductor compiles C++ for the CPU and found no compiler ({problem}): "
                "install g++ (Debian/Ubuntu: apt-get install g++) or point the CXX "
                "variable at a C++ compiler"
            )
    torch_compat.compile_package(exported_program(spec, native, signature), path)


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


class Uncapturable(ExportError):
    """torch.export cannot capture the module (data-dependent control flow, an unsupported
    op): the message is the whole refusal."""


class NoCompiler(ExportError):
    """AOTInductor has no C++ compiler to call: the message says what to install."""


WITHOUT_TORCH_EXPORT = ("torchscript-script", "torchscript-trace")
"""Formats captured without torch.export (TorchScript compiles or traces the Python)."""


def _first_lines(text: str, lines: int = 3) -> str:
    """torch.export's reason, without the pages of debugging advice it appends."""
    kept = " ".join(line.strip() for line in text.strip().splitlines()[:lines] if line.strip())
    return kept.rstrip(".")


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
    "torch-export": export_torch_export,
    "aoti": export_aoti,
}


def export(
    fmt: str,
    spec: ModelSpec,
    native: NativeModel,
    path: Path,
    signature: Signature,
    *,
    numerics: Numerics = "strict",
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
        # torch's TorchScript deprecation said once a process; every other warning (a
        # TracerWarning: a trace that froze a branch or a shape) reaches the user
        with contextlib.redirect_stdout(chatter), torchscript_notice.torchscript_calls():
            exporter(spec, native, path, signature)
    except (Uncapturable, NoCompiler) as exc:  # already the whole story: name the variant
        raise ExportError(
            f"exporting model {spec.name!r} as {fmt} ({native.precision}) failed: {exc}"
        ) from exc
    except Exception as exc:  # exporters raise anything; keep their message, name the variant
        raise ExportError(
            f"exporting model {spec.name!r} as {fmt} ({native.precision}) failed: "
            f"{type(exc).__name__}: {exc}\n{chatter.getvalue()[-4000:]}"
        ) from exc
    finally:
        quiet.setLevel(level)
