"""Repository layer: `ModelSpec` in, a directory Triton can serve out: signature, exporters,
config.pbtxt, variant planning, warm-up samples, and the PyTorch reference outputs.

Rule: imports only `base`, `client` and `parity`; never a launcher (what a server offers comes
in as `base.server_offer.ServerTarget`).
"""

from pytest_triton.base.formats import FORMATS
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.pipeline import PipelineSpec, Step
from pytest_triton.repository.pipeline_build import PipelineRepository
from pytest_triton.repository.spec import (
    DynamicBatching,
    InstanceGroup,
    Int8,
    ModelSpec,
    TensorSpec,
)
from pytest_triton.repository.variants import Variant

__all__ = [
    "FORMATS",
    "DynamicBatching",
    "InstanceGroup",
    "Int8",
    "ModelSpec",
    "PipelineRepository",
    "PipelineSpec",
    "Repository",
    "Step",
    "TensorSpec",
    "Variant",
]
