"""Parity layer: served outputs against PyTorch's, with per-dtype tolerances and messages that
say where they broke; `ParityResult`, what one check found.

Rule: imports only `base` and `client`.
"""
