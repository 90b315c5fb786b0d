"""The contract with torch's private AOTInductor names (repository/torch_compat.py): each
still exists and takes what this package passes it. A torch upgrade that moves one fails here,
naming it, instead of in a served model's load."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest

from pytest_triton.repository import torch_compat


@pytest.mark.parametrize("name", torch_compat.NAMES)
def test_every_private_name_still_resolves(name: str) -> None:
    assert callable(torch_compat.torch_function(name))


def test_the_compile_takes_a_package_path_and_the_loader_a_path() -> None:
    compile_parameters = inspect.signature(
        torch_compat.torch_function(torch_compat.COMPILE)
    ).parameters
    assert "package_path" in compile_parameters
    loader = inspect.signature(torch_compat.torch_function(torch_compat.LOADER)).parameters
    assert next(iter(loader)) == "path"


def test_a_vanished_name_says_which_and_what_to_do() -> None:
    with pytest.raises(torch_compat.TorchChanged, match=r"torch 2\.\S+ has no torch\._inductor\."):
        torch_compat.torch_function("torch._inductor.no_such_entry_point")
    with pytest.raises(torch_compat.TorchChanged, match="update it for this torch"):
        torch_compat.torch_function("torch._no_such_module.compile")


def test_the_work_directory_is_inductors_and_is_removed_also_on_failure() -> None:
    seen: list[Path] = []
    with pytest.raises(RuntimeError, match="compile failed"), torch_compat.work_directory() as d:
        seen.append(d)
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(d)
        (d / "kernel.cpp").write_text("// a compile's leftovers")
        raise RuntimeError("compile failed")
    assert not seen[0].exists()
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") != str(seen[0])


def test_the_cpu_isa_is_named() -> None:
    assert torch_compat.cpu_isa()  # e.g. avx2, avx512: an export cache key part
