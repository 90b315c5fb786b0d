"""Modules that moved, still importable from where they were: a file written against an older
layout keeps working and is told, once, where the module lives now.

The old name is an alias of the new module object (never a second copy: listeners installed
at import and module-level state stay single). One table for every move; the CHANGELOG lists
the same moves.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED: dict[str, str] = {
    # old dotted name (a module, or a package whose submodules moved with it) -> new name
    "pytest_triton.load.locust": "pytest_triton.load.runner",
    "pytest_triton.load.sweep": "pytest_triton.load.perf",
    "pytest_triton.load.runner.arrivals": "pytest_triton.load.measure.arrivals",
}


def moved_to(name: str) -> str | None:
    """Where the module once named `name` lives now (None: it did not move); a name that
    moved twice is followed to its last place."""
    found = None
    for _ in range(len(MOVED)):
        # the longest old name that `name` is, or lies under, wins
        old = max(
            (o for o in MOVED if name == o or name.startswith(o + ".")), key=len, default=None
        )
        if old is None:
            break
        name = found = MOVED[old] + name[len(old) :]
    return found


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds old names before the path finder does, so that an old package's submodule is
    not loaded a second time from the new package's folder."""

    def __init__(self) -> None:
        self._own_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if moved_to(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = moved_to(spec.name)
        assert new is not None  # find_spec said so
        warnings.warn(
            f"{spec.name} moved to {new}: import it from there (the old name will go)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old spec on the (shared) module: give it back its own.
        old = next(n for n, m in sys.modules.items() if m is module and n in self._own_specs)
        module.__spec__ = self._own_specs.pop(old)


def install() -> None:
    """Put the finder first on the import path, once per process."""
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())
