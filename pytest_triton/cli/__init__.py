"""Command-line front end: `triton-deploy` (NVIDIA's deployer.py flags).

Rule: a front end; imports any layer below, never `plugin` or `load`.
"""

from pytest_triton.base.moved import forwarder

__getattr__ = forwarder(__name__)  # the names of the module this package replaced (0.1.0)
