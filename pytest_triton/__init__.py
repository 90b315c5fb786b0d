"""pytest-triton: gate releases of PyTorch models served by NVIDIA Triton Inference Server.

The package is one folder per layer, each importing only from those below it
(docs/architecture.md; tests/test_architecture.py keeps the rules):
front ends `plugin` (pytest), `load` (Locust, triton-perf), `cli`; then `gate` (the report,
from documents only), `session`, `server`, `models`, `repository`, `accuracy`, `parity`,
`client`, `base`.
"""

import importlib
from typing import TYPE_CHECKING, Any

from pytest_triton.base.version import __version__ as __version__

if TYPE_CHECKING:
    from pytest_triton.accuracy.check import assert_accuracy
    from pytest_triton.accuracy.metrics import Metric
    from pytest_triton.accuracy.outcome import AccuracyResult
    from pytest_triton.base.config import TritonConfig
    from pytest_triton.base.errors import (
        ConfigError,
        DatasetError,
        ExportError,
        InferenceError,
        ModelLoadError,
        ParityNotApplicable,
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
    from pytest_triton.plugin import factories
    from pytest_triton.repository import (
        DynamicBatching,
        InstanceGroup,
        Int8,
        ModelSpec,
        PipelineSpec,
        Repository,
        Step,
        TensorSpec,
    )
    from pytest_triton.repository.sequence import SequenceSpec
    from pytest_triton.session.deployment import Deployment, ServedModel
    from pytest_triton.session.served_pipeline import ServedPipeline
    from pytest_triton.session.served_sequences import ServedSequenceModel


# Each public name and the module that holds it, imported on first use: a Locust process or a
# client that needs TritonClient does not pay for torch (the repository layer imports it).
_HOME = {
    "AccuracyResult": "pytest_triton.accuracy.outcome",
    "Metric": "pytest_triton.accuracy.metrics",
    "assert_accuracy": "pytest_triton.accuracy.check",
    "TritonConfig": "pytest_triton.base.config",
    **dict.fromkeys(
        [
            "ConfigError",
            "DatasetError",
            "ExportError",
            "InferenceError",
            "ModelLoadError",
            "ParityNotApplicable",
            "RefusedError",
            "ServerError",
            "SharedMemoryError",
            "SpecError",
            "TritonTestError",
        ],
        "pytest_triton.base.errors",
    ),
    **dict.fromkeys(
        ["ModelStats", "StatsWindow", "assert_dynamic_batching"], "pytest_triton.client.stats"
    ),
    "TritonClient": "pytest_triton.client.triton_client",
    "Tolerance": "pytest_triton.parity.compare",
    "assert_parity": "pytest_triton.parity.compare",
    "ParityResult": "pytest_triton.parity.results",
    **dict.fromkeys(
        [
            "DynamicBatching",
            "InstanceGroup",
            "Int8",
            "ModelSpec",
            "PipelineSpec",
            "Repository",
            "Step",
            "TensorSpec",
        ],
        "pytest_triton.repository",
    ),
    "Deployment": "pytest_triton.session.deployment",
    "ServedModel": "pytest_triton.session.deployment",
    "ServedPipeline": "pytest_triton.session.served_pipeline",
    "SequenceSpec": "pytest_triton.repository.sequence",
    "ServedSequenceModel": "pytest_triton.session.served_sequences",
}


def __getattr__(name: str) -> Any:
    """Public names load their module when first asked for (`factories`
    is pytest's side of the package)."""
    if name == "factories":
        return importlib.import_module("pytest_triton.plugin.factories")
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_triton' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


__all__ = [
    "AccuracyResult",
    "ConfigError",
    "DatasetError",
    "Deployment",
    "DynamicBatching",
    "ExportError",
    "InferenceError",
    "InstanceGroup",
    "Int8",
    "Metric",
    "ModelLoadError",
    "ModelSpec",
    "ModelStats",
    "ParityNotApplicable",
    "ParityResult",
    "PipelineSpec",
    "RefusedError",
    "Repository",
    "SequenceSpec",
    "ServedModel",
    "ServedPipeline",
    "ServedSequenceModel",
    "ServerError",
    "SharedMemoryError",
    "SpecError",
    "StatsWindow",
    "Step",
    "TensorSpec",
    "Tolerance",
    "TritonClient",
    "TritonConfig",
    "TritonTestError",
    "assert_accuracy",
    "assert_dynamic_batching",
    "assert_parity",
    "factories",
]
