"""ONNX, torch.export and AOTInductor exports reused across processes and runs, where
PYTEST_TRITON_EXPORT_CACHE names a directory: torch.onnx's dynamo exporter takes seconds a
model (even a tiny one: most of it the exporter's own imports), an AOTInductor compile tens
of seconds, and a load test, a triton-perf run or a pytest session exports the same module
again each time it starts. An AOTInductor entry's key adds the CPU's vector instruction set
its kernels were compiled for.

An entry is keyed by everything the artifact is made from: the format, precision and device;
the signature (names, dtypes, dynamic axes) and batching; the example inputs; every
parameter and buffer; every plain attribute of every submodule; the source files that
define the submodules' classes; torch's version and this package's exporter. A change to
any of those exports anew. Not covered: code outside those files that `forward` calls (a
helper module's function): after changing such code, remove the directory. A stale entry
cannot pass unnoticed: parity compares the served model with the module itself.

TorchScript exports take milliseconds and TensorRT engines belong to one GPU: neither is
cached. Off unless the variable is set.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from pytest_triton.repository import torch_compat
from pytest_triton.repository.quantization import calibration_batches
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.signature import Signature
from pytest_triton.repository.spec import ModelSpec

ENVIRONMENT = "PYTEST_TRITON_EXPORT_CACHE"
CACHED_FORMATS = frozenset({"onnx", "onnx-trt", "torch-export", "aoti"})
_EXPORTER = Path(__file__).with_name("exporters.py")
_COMPAT = Path(__file__).with_name("torch_compat.py")
_QUANTIZER = Path(__file__).with_name("quantization.py")


def directory() -> Path | None:
    """The cache's directory, None when caching is off."""
    value = os.environ.get(ENVIRONMENT, "").strip()
    return Path(value) if value else None


def key(fmt: str, spec: ModelSpec, native: NativeModel, signature: Signature) -> str | None:
    """The entry's name for this export; None where it is not cached (the format, or a
    class whose source cannot be read)."""
    if fmt not in CACHED_FORMATS:
        return None
    digest = hashlib.sha256()

    def add(*parts: object) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else repr(part).encode()
            digest.update(len(data).to_bytes(8, "little") + data)

    add(fmt, native.precision, str(native.device), torch.__version__, _EXPORTER.read_bytes())
    if fmt == "aoti":  # native code: the compile's own entry points and the CPU's vector ISA
        add(_COMPAT.read_bytes(), torch_compat.cpu_isa() if native.device.type == "cpu" else "")
    add(signature, spec.batched, spec.max_batch_size, spec.input_names, spec.output_names)
    for name, tensor in spec.example_tensors().items():
        add(name, *_tensor_parts(tensor))
    module = native.module
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        add(name, *_tensor_parts(tensor))
    classes: set[type] = set()
    for name, submodule in module.named_modules():
        add(name, type(submodule).__qualname__, _plain_attributes(submodule))
        classes.update(type(submodule).__mro__)
    sources: set[str] = set()
    for cls in classes:  # each class once: a model repeats its blocks many times
        if cls.__module__.split(".")[0] in ("torch", "builtins"):
            continue
        source = _source_of(cls)
        if source is None:
            return None
        sources.add(source)
    add(*sorted(sources))
    if native.precision == "int8":  # the quantizer, how the spec declares it, its batches
        add(_QUANTIZER.read_bytes(), spec.int8_options)
        for batch in calibration_batches(spec):
            for name, array in sorted(batch.items()):
                add(name, str(array.dtype), array.shape, np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _tensor_parts(tensor: torch.Tensor) -> tuple[object, ...]:
    cpu = tensor.detach().to("cpu").contiguous()
    return str(cpu.dtype), tuple(cpu.shape), cpu.reshape(-1).view(torch.uint8).numpy().tobytes()


def _plain_attributes(module: torch.nn.Module) -> list[tuple[str, str]]:
    """A submodule's own settings (a scale, a flag), which no state_dict holds. Values whose
    repr names an address make the key new each time: never reused, never wrong."""
    return sorted((k, repr(v)) for k, v in vars(module).items() if not k.startswith("_"))


def _source_of(cls: type) -> str | None:
    """The whole file that defines `cls` (a changed helper in the same file counts), or the
    class's own source where it has no file; None where neither can be read."""
    with contextlib.suppress(OSError, TypeError):
        path = inspect.getsourcefile(cls)
        if path and os.path.exists(path):
            return Path(path).read_text(errors="replace")
    with contextlib.suppress(OSError, TypeError):
        return inspect.getsource(cls)
    return None


def restore(root: Path, entry: str, version_dir: Path) -> bool:
    """Copy a cached export's files into `version_dir` (copies, not links: a repository's
    file changed in place must not change the entry); False when there is none."""
    source = root / entry
    if not source.is_dir():
        return False
    version_dir.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        shutil.copyfile(path, version_dir / path.name)
    return True


def store(root: Path, entry: str, version_dir: Path) -> None:
    """Keep what the exporter wrote in `version_dir` (the artifact, and external weights
    where it wrote them); another process storing the same entry meanwhile wins."""
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry}-", dir=root))
    try:
        for path in version_dir.iterdir():
            if path.is_file():
                shutil.copyfile(path, staging / path.name)
        with contextlib.suppress(OSError):  # exists: stored by another process first
            staging.rename(root / entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
