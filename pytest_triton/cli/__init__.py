"""Command-line front end: every tool's argument parsing and entry point: `triton-deploy`
(NVIDIA's deployer.py flags), `triton-perf` and `triton-tune` (their work is in `load/`).

Rule: a front end; imports any layer below (`load` included), never `plugin`.
"""

from pytest_triton.base.grpc_fork import without_grpc_fork_handlers

without_grpc_fork_handlers()  # before a command imports grpc (base/grpc_fork.py says why)
