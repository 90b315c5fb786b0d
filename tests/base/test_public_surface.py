"""The public surface, pinned: what `pytest_triton`, its `factories` and a locustfile's
helpers offer; the module paths of the unreleased 0.1.0 fail to import as Python says
(CHANGELOG.md's table names where each went)."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings

import pytest

import pytest_triton
from tests.helpers.locust_runs import REPO, subprocess_env

TOP_LEVEL = [
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
FACTORIES = ["client", "model", "pipeline", "repository", "sequence_model", "server"]
LOCUSTFILE_HELPERS = [
    "EmbeddedModel",
    "GrpcTritonUser",
    "HttpTritonUser",
    "TritonUser",
    "default_targets",
    "zoo_model",
]


def test_the_top_level_names_are_pinned() -> None:
    assert sorted(pytest_triton.__all__) == TOP_LEVEL
    for name in TOP_LEVEL:
        assert getattr(pytest_triton, name) is not None, name


def test_factories_import_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from pytest_triton import factories
    for name in FACTORIES:
        assert callable(getattr(factories, name)), name


def test_the_locustfile_helpers_are_pinned() -> None:
    """Read without importing them (they import locust, which patches this process)."""
    import pytest_triton.load as load

    assert sorted(load.__all__) == LOCUSTFILE_HELPERS
    users = ast.parse((REPO / "pytest_triton" / "load" / "users.py").read_text())
    (declared,) = [
        node.value
        for node in users.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
    ]
    assert sorted(ast.literal_eval(declared)) == LOCUSTFILE_HELPERS


IMPORT_SIDE_EFFECTS = """
import os, sys
before, finders, hooks = dict(os.environ), list(sys.meta_path), list(sys.path_hooks)
import pytest_triton
assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())
assert sys.meta_path == finders and sys.path_hooks == hooks, sys.meta_path
import pytest_triton.cli  # a front end (as pytest's plugin and the load package) turns them off
print(os.environ.get("GRPC_ENABLE_FORK_SUPPORT"))
"""


def test_importing_the_package_changes_no_variable_and_installs_nothing() -> None:
    """Importing `pytest_triton` leaves the environment and the import system as they were;
    the front ends (here the command lines') turn gRPC's fork handlers off
    (base/grpc_fork.py; tests/client/test_client.py runs pytest's)."""
    env = {k: v for k, v in subprocess_env().items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_SIDE_EFFECTS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["false"]


@pytest.mark.parametrize(
    ("old", "missing"),
    [
        ("pytest_triton.launchers", ""),  # 0.1.0's paths, before the layout
        ("pytest_triton.load.embedded", ""),  # the README of the time imported it
        ("pytest_triton.wire.shm", "pytest_triton.wire"),
        ("pytest_triton.factories", ""),  # `from pytest_triton import factories` stays
        ("pytest_triton.load.perf.__main__", ""),  # `python -m`: the console scripts now
    ],
)
def test_an_old_module_path_fails_as_python_says(old: str, missing: str) -> None:
    with pytest.raises(
        ModuleNotFoundError, match=rf"^No module named '{re.escape(missing or old)}'$"
    ):
        importlib.import_module(old)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("pytest_triton.parity", "assert_parity"),  # modules that became packages
        ("pytest_triton.client", "TritonClient"),
        ("pytest_triton.base.config", "resolve"),  # names that left a module
        ("pytest_triton.load.perf.command", "perf_main"),
    ],
)
def test_an_old_name_fails_as_python_says(module: str, name: str) -> None:
    with pytest.raises(ImportError, match=rf"cannot import name '{name}' from '{module}'"):
        exec(f"from {module} import {name}", {})
