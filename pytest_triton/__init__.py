"""pytest-triton: gate releases of PyTorch models served by NVIDIA Triton Inference Server."""

from .client import TritonClient
from .config import TritonConfig
from .deployment import Deployment, ServedModel
from .errors import (
                     ConfigError,
                     ExportError,
                     InferenceError,
                     ModelLoadError,
                     ServerError,
                     SharedMemoryError,
                     SpecError,
                     TritonTestError,
)
from .parity import Tolerance, assert_parity
from .repository import DynamicBatching, InstanceGroup, ModelSpec, Repository, TensorSpec
from .results import ParityResult
from .stats import ModelStats, StatsWindow, assert_dynamic_batching

__version__ = "0.1.0"
__all__ = [
                     "ConfigError",
                     "Deployment",
                     "DynamicBatching",
                     "ExportError",
                     "InferenceError",
                     "InstanceGroup",
                     "ModelLoadError",
                     "ModelSpec",
                     "ModelStats",
                     "ParityResult",
                     "Repository",
                     "ServedModel",
                     "ServerError",
                     "SharedMemoryError",
                     "SpecError",
                     "StatsWindow",
                     "TensorSpec",
                     "Tolerance",
                     "TritonClient",
                     "TritonConfig",
                     "TritonTestError",
                     "assert_dynamic_batching",
                     "assert_parity",
]
