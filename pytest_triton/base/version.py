"""The package's version, read from its installed metadata: pyproject.toml's `version` is the
one place it is written (semantic versioning from 1.0.0)."""

from importlib import metadata

DISTRIBUTION = "pytest-triton"
__version__ = metadata.version(DISTRIBUTION)
