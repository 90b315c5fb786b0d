"""The public surface, pinned: what `pytest_triton`, `pytest_triton.factories` and a
locustfile's helpers offer; and every module moved since 0.1.0 still imports from its old
path, as the same module, with a DeprecationWarning that names the new one."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import warnings

import pytest

import pytest_triton
from pytest_triton.base import moved
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


def test_factories_import_both_ways_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pytest_triton.factories", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from pytest_triton import factories

        imported = importlib.import_module("pytest_triton.factories")
    assert imported is factories
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


def test_a_moved_module_imports_from_its_old_path_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "pytest_triton.launchers", raising=False)
    with pytest.warns(DeprecationWarning, match=r"pytest_triton\.launchers moved to "):
        from pytest_triton.launchers import ExternalLauncher, LocalLauncher  # type: ignore
    from pytest_triton.server import ExternalLauncher as now_external
    from pytest_triton.server import LocalLauncher as now_local

    assert LocalLauncher is now_local and ExternalLauncher is now_external
    with pytest.warns(DeprecationWarning, match=r"parity\.compare\.assert_parity"):
        from pytest_triton.parity import assert_parity  # type: ignore[attr-defined]
    assert assert_parity is pytest_triton.assert_parity


def test_every_old_path_has_its_stub_and_every_target_exists() -> None:
    """One stub per old path in base/old_paths/, laid out as 0.1.0's package was, and no
    other; no old name exists as a module of the package itself (it would shadow the stub)."""
    package, stubs = REPO / "pytest_triton", REPO / "pytest_triton" / "base" / "old_paths"
    old = [*moved.MOVED_MODULES, *moved.PUBLIC_ALIASES]
    found = sorted(
        ".".join(path.relative_to(stubs).with_suffix("").parts).removesuffix(".__init__")
        for path in stubs.rglob("*.py")
    )
    assert found == sorted(old)
    for name in old:
        new = moved.MOVED_MODULES.get(name) or moved.PUBLIC_ALIASES[name]
        assert importlib.util.find_spec(f"pytest_triton.{new}") is not None, new
        path = package.joinpath(*name.split("."))
        assert not path.with_suffix(".py").exists() and not (path / "__init__.py").exists(), (
            f"{name} exists as a module: its stub would never be used"
        )
    for homes in moved.BECAME_PACKAGES.values():
        for new in (homes,) if isinstance(homes, str) else homes:
            assert importlib.util.find_spec(f"pytest_triton.{new}") is not None, new


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
    ("module", "name"),
    [(m, n) for m, homes in moved.MOVED_NAMES.items() for n in sorted(homes)],
)
def test_a_name_that_left_its_module_is_found_from_there_with_a_warning(
    module: str, name: str
) -> None:
    new = f"pytest_triton.{moved.MOVED_NAMES[module][name]}"
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{name} moved to {new}\.{name}"):
        found = getattr(importlib.import_module(f"pytest_triton.{module}"), name)
    assert found is getattr(importlib.import_module(new), name)


OLD_LOCUSTFILE_IMPORTS = """
import locust  # as in a Locust process: it patches the process before the locustfile
import json, sys, warnings, importlib
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from pytest_triton.load.embedded import EmbeddedModel
    from pytest_triton.load import TritonUser, zoo_model, default_targets
seen = {"locustfile": [f"{w.filename}:{w.message}" for w in caught
                       if w.category is DeprecationWarning]}
from pytest_triton.base import moved
for old, new in moved.MOVED_MODULES.items():
    sys.modules.pop("pytest_triton." + old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module("pytest_triton." + old)
    now = importlib.import_module("pytest_triton." + new)
    if hasattr(now, "__path__"):  # a package: its stub forwards the names, its own stays
        public = [n for n in dir(now) if not n.startswith("_")]
        assert public and all(getattr(module, n) is getattr(now, n) for n in public), old
    else:
        assert module is now, old
    seen[old] = [str(w.message) for w in caught if w.category is DeprecationWarning
                 and str(w.message).startswith("pytest_triton." + old + " ")]
print(json.dumps(seen))
"""


def test_every_old_path_imports_as_the_new_module_in_a_locust_process() -> None:
    """In a process of its own (load modules import locust): every 0.1.0 path gives the
    module that now holds it (a package's old path its names) and warns once, naming it; a
    0.1.0 locustfile's import works."""
    done = subprocess.run(
        [sys.executable, "-c", OLD_LOCUSTFILE_IMPORTS],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for old, new in moved.MOVED_MODULES.items():
        messages = seen[old]
        want = f"pytest_triton.{old} moved to pytest_triton.{new} "
        assert len(messages) == 1 and messages[0].startswith(want), (old, messages)
    (locustfile,) = seen["locustfile"]
    assert "<string>" in locustfile and "load.runner.embedded" in locustfile, locustfile
