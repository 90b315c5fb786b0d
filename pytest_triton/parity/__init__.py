"""Parity layer: served outputs against PyTorch's, with per-dtype tolerances and messages that
say where they broke; `ParityResult`, what one check found.

Rule: imports only `base` and `client`.
"""

from pytest_triton.base.moved import forwarder

__getattr__ = forwarder(__name__)  # the names of the module this package replaced (0.1.0)
