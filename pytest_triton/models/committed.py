"""The committed model_repository/: each zoo model's config.pbtxt as a user would deploy it.

    python -m pytest_triton.models.committed model_repository

writes them from the zoo's full configurations (shapes from a meta-device forward, nothing
allocated) and the examples' serving settings; a test keeps the committed files equal to this.
Artifacts are built on demand, e.g.
`triton-deploy --onnx --native --save-dir model_repository -- --config resnext101-32x4d`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.dtypes import tensor_type
from pytest_triton.models import ZOO, TensorInfo
from pytest_triton.models.specs import zoo_spec
from pytest_triton.repository import pbtxt
from pytest_triton.repository.signature import ServedTensor, Signature
from pytest_triton.repository.variants import Variant

COMMITTED_FORMAT = "onnx"  # every seed deploys an ONNX variant; native onnxruntime_onnx


def zoo_signature(name: str) -> Signature:
    entry = ZOO[name]
    inputs, outputs = entry.io_spec(entry.full)

    def served(infos: list[TensorInfo]) -> tuple[ServedTensor, ...]:
        return tuple(ServedTensor(i.name, tensor_type(i.dtype), tuple(i.dims)) for i in infos)

    return Signature(served(inputs), served(outputs))


def committed_config(name: str) -> mc.ModelConfig:
    entry = ZOO[name]
    spec = zoo_spec(
        name,
        "full",
        instance_kind=entry.serving.instance_kind,
        formats=[COMMITTED_FORMAT],
        triton_name=name,
        example_batch=2,
    )
    variant = Variant(
        spec, COMMITTED_FORMAT, "fp32", hosted=False, instance_kind=entry.serving.instance_kind
    )
    return pbtxt.model_config(variant, zoo_signature(name))


def write_committed_configs(root: Path) -> list[Path]:
    written = []
    for name in ZOO:
        directory = root / name
        directory.mkdir(parents=True, exist_ok=True)
        header = f"# {ZOO[name].description}. Serving settings: {ZOO[name].serving.source}.\n"
        path = pbtxt.write_config(directory, committed_config(name))
        path.write_text(header + path.read_text())
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover
    for written_path in write_committed_configs(
        Path(sys.argv[1] if len(sys.argv) > 1 else "model_repository")
    ):
        print(f"wrote {written_path}")
