"""Command-line front end: `triton-deploy` (NVIDIA's deployer.py flags).

Rule: a front end; imports any layer below, never `plugin` or `load`.
"""
