"""Versions a reviewer needs to reproduce a gate run."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

from pytest_triton.base.version import DISTRIBUTION

PACKAGES = (
    DISTRIBUTION,
    "torch",
    "onnxruntime",
    "onnx",
    "tritonclient",
    "numpy",
    "nvidia-pytriton",
    "pytest",
    "locust",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions by distribution name; None for one not installed."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def environment() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": package_versions(),
    }
