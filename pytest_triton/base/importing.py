"""MODULE:CALLABLE references, as settings and command lines name user code."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from pytest_triton.base.errors import ConfigError


def load_object(reference: str, default_attr: str | None = None) -> Any:
    """The object `module:attr` names (`module` alone takes `default_attr`). A module that
    is not on sys.path is looked for in the current directory too, as `python -m` does:
    an installed command (triton-tune, triton-perf) starts with its own folder there instead,
    and `triton-tune -m my_specs:factory` beside my_specs.py must find it."""
    module_name, _, attr = reference.partition(":")
    attr = attr or default_attr or ""
    if not module_name or not attr:
        raise ConfigError(f"{reference!r} is not MODULE:CALLABLE (e.g. mypkg.specs:make_specs)")
    try:
        module = _import(module_name)
        return getattr(module, attr)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"cannot load {reference!r}: {exc} (looked on sys.path and in the current "
            f"directory {os.getcwd()}; run from the folder that holds it, or add its folder "
            "to PYTHONPATH)"
        ) from None
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {reference!r}: {exc}") from None


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        here = os.getcwd()
        if exc.name != top or any(os.path.abspath(p or ".") == here for p in sys.path):
            raise  # missing inside the module, or the current directory was searched
        sys.path.insert(0, here)
        importlib.invalidate_caches()
        return importlib.import_module(module_name)
