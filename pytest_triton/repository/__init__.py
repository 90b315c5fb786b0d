"""Model repository: specs in, a directory Triton can serve out."""

from .builder import Repository
from .spec import FORMATS, DynamicBatching, InstanceGroup, ModelSpec, TensorSpec
from .variants import Variant

__all__ = ["FORMATS", "DynamicBatching", "InstanceGroup", "ModelSpec", "Repository", "TensorSpec",
           "Variant"]
