"""pytest-triton: gate releases of PyTorch models served by NVIDIA Triton Inference Server.

The package is one folder per layer, each importing only from those below it
(docs/architecture.md; tests/test_architecture.py keeps the rules):
front ends `plugin` (pytest), `load` (Locust, triton-perf), `cli`; then `gate` (the report,
from documents only), `session`, `server`, `models`, `repository`, `parity`, `client`, `base`.
"""

import importlib
from importlib.metadata import version
from typing import Any

from pytest_triton.base import moved
from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import (
    ConfigError,
    ExportError,
    InferenceError,
    ModelLoadError,
    RefusedError,
    ServerError,
    SharedMemoryError,
    SpecError,
    TritonTestError,
)
from pytest_triton.client.stats import ModelStats, StatsWindow, assert_dynamic_batching
from pytest_triton.client.triton_client import TritonClient
from pytest_triton.parity.compare import Tolerance, assert_parity
from pytest_triton.parity.results import ParityResult
from pytest_triton.repository import (
    DynamicBatching,
    InstanceGroup,
    ModelSpec,
    Repository,
    TensorSpec,
)
from pytest_triton.session.deployment import Deployment, ServedModel

__version__ = version("pytest-triton")
moved.install()  # names moved since 0.1.0 keep working from their old paths, with a warning


def __getattr__(name: str) -> Any:
    """`from pytest_triton import factories` (public since 0.1.0) without importing pytest's
    side of the package for users of the library alone."""
    if name == "factories":
        return importlib.import_module("pytest_triton.plugin.factories")
    raise AttributeError(f"module 'pytest_triton' has no attribute {name!r}")


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
    "RefusedError",
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
    "factories",
]
