"""Base layer: the settings table and resolved configuration, tensor types, errors, URLs,
child processes, what a server offers.

Rule: imports nothing else from pytest_triton; every other layer may import it.
"""
