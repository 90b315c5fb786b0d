"""The private torch names this package uses for AOTInductor, in one place.

AOTInductor's compile and load entry points live under `torch._inductor`, a private module
that torch may rename between releases. Everything else imports them from here, and
tests/repository/test_torch_compat.py fails, naming the missing name, when a torch upgrade
moves one. The hosted model.py (which imports nothing from this package) is told the
loader's name through its config (`LOADER`).
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from pytest_triton.base.errors import ExportError

COMPILE = "torch._inductor.aoti_compile_and_package"
"""Compiles an ExportedProgram into a .pt2 package of native kernels (package_path=...)."""
LOADER = "torch._inductor.aoti_load_package"
"""Loads such a package into a callable runner; written into hosted configs."""
CACHE_DIRECTORY = "torch._inductor.runtime.cache_dir_utils.temporary_cache_dir"
"""Points inductor's work directory (TORCHINDUCTOR_CACHE_DIR) somewhere for a while."""
CPU_ISA = "torch._inductor.cpu_vec_isa.pick_vec_isa"
"""The vector instruction set inductor compiles CPU kernels for (avx2, avx512, ...)."""
CXX_COMPILER = "torch._inductor.cpp_builder.get_cpp_compiler"
"""The C++ compiler inductor calls (the CXX variable, else c++/g++/clang++ on PATH)."""

NAMES = (COMPILE, LOADER, CACHE_DIRECTORY, CPU_ISA, CXX_COMPILER)


class TorchChanged(ExportError):
    """A private torch name this package relies on is gone: torch changed under us."""


def torch_function(dotted: str) -> Callable[..., Any]:
    """The function a dotted name points at, or TorchChanged naming it and torch's version."""
    module_name, _, attribute = dotted.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise TorchChanged(
            f"torch {torch.__version__} has no {dotted} ({exc}); pytest_triton's "
            "torch_compat.py names it for the AOTInductor format: update it for this torch, "
            "or pin the torch this package supports"
        ) from exc
    if not callable(found):
        raise TorchChanged(f"torch {torch.__version__}: {dotted} is no longer a function")
    return found  # type: ignore[no-any-return]


def torch_version() -> str:
    """The torch a package is compiled by: another one cannot load it."""
    return str(torch.__version__)


def cxx_problem() -> str | None:
    """Why AOTInductor cannot compile for the CPU here (no C++ compiler), or None."""
    search = torch_function(CXX_COMPILER)
    try:
        compiler = str(search())
    except Exception as exc:  # inductor's InvalidCxxCompiler: none of its candidates ran
        return f"{type(exc).__name__}: {exc}".strip()
    if shutil.which(compiler) is None:
        return f"the C++ compiler {compiler!r} is not on PATH"
    return None


def cpu_isa() -> str:
    """The instruction set compiled CPU kernels need: a package built for avx512 crashes on a
    machine without it, so it is part of an export cache entry's key."""
    return str(torch_function(CPU_ISA)())


@contextlib.contextmanager
def work_directory() -> Iterator[Path]:
    """A fresh inductor work directory for one compile, removed afterwards, also when the
    compile fails or is interrupted (inductor's own default keeps everything under /tmp)."""
    directory = Path(tempfile.mkdtemp(prefix="pytest-triton-aoti-"))
    try:
        with torch_function(CACHE_DIRECTORY)(str(directory)):
            yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def compile_package(program: torch.export.ExportedProgram, path: Path) -> None:
    """AOTInductor's package of `program` at `path`, compiled in a work directory of its own
    for the device the program's tensors are on."""
    with work_directory():
        torch_function(COMPILE)(program, package_path=str(path))
