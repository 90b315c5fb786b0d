"""Triton's model_warmup for a variant: samples from the spec, as raw input files in the model
directory (`warmup/<input>`), and the ModelWarmup messages that reference them.

Triton runs each warm-up sample `count` times, as `batch_size` requests of that one sample,
before the model is ready, so the first request a test sends meets the model production
serves after its warm-up (TorchScript's profiling executor re-optimizes after its first runs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.dtypes import Array
from pytest_triton.repository.signature import Signature
from pytest_triton.repository.spec import ModelSpec
from pytest_triton.repository.variants import Variant

WARMUP_DIR = "warmup"
SAMPLE_SEED = 0


def batch_sizes(spec: ModelSpec) -> tuple[int, ...]:
    """Batch 1 (what a dynamic batcher often runs) and the example batch, for batched specs;
    unbatched models take their one input shape."""
    if not spec.batched:
        return (1,)
    example = next(iter(spec.example_tensors().values())).shape[0]
    return tuple(sorted({1, min(int(example), spec.max_batch_size)}))


def sample(variant: Variant, signature: Signature) -> dict[str, Array]:
    """One sample per input (no batch axis), at the variant's wire types (half for fp16)."""
    rows = variant.spec.make_inputs(1, seed=SAMPLE_SEED)
    sig = signature.with_precision(variant.precision)
    out = {}
    for tensor in sig.inputs:
        array = rows[tensor.name][0] if variant.spec.batched else rows[tensor.name]
        out[tensor.name] = np.ascontiguousarray(array.astype(tensor.type.numpy, copy=False))
    return out


def messages(variant: Variant, signature: Signature) -> list[mc.ModelWarmup]:
    """The config's model_warmup entries; none when the variant asks for no warm-up."""
    if not variant.warmup:
        return []
    data = sample(variant, signature)
    sig = signature.with_precision(variant.precision)
    found = []
    for batch in batch_sizes(variant.spec):
        message = mc.ModelWarmup(
            name=f"{variant.spec.name}_sample_batch_{batch}", batch_size=batch, count=variant.warmup
        )
        for tensor in sig.inputs:
            entry = message.inputs[tensor.name]
            entry.data_type = mc.DataType.Value(tensor.type.config)
            entry.dims.extend(list(data[tensor.name].shape) or [1])
            entry.input_data_file = tensor.name
        found.append(message)
    return found


def write_samples(model_dir: Path, variant: Variant, signature: Signature) -> None:
    """The files the messages reference (row-major raw bytes, as Triton reads them)."""
    if not variant.warmup:
        return
    directory = model_dir / WARMUP_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in sample(variant, signature).items():
        (directory / name).write_bytes(array.tobytes())
