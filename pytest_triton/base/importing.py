"""MODULE:CALLABLE references, as settings and command lines name user code."""

from __future__ import annotations

import importlib
from typing import Any

from pytest_triton.base.errors import ConfigError


def load_object(reference: str, default_attr: str | None = None) -> Any:
    """The object `module:attr` names (`module` alone takes `default_attr`)."""
    module_name, _, attr = reference.partition(":")
    attr = attr or default_attr or ""
    if not module_name or not attr:
        raise ConfigError(f"{reference!r} is not MODULE:CALLABLE (e.g. mypkg.specs:make_specs)")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {reference!r}: {exc}") from None
