"""`python -m pytest_triton.load.perf`, as before triton-perf's command line moved to
pytest_triton/cli/triton_perf.py: still runs it, and says where it is now."""

from pytest_triton.base.moved import run_moved_command

run_moved_command("load.perf", "cli.triton_perf", "perf_main", "triton-perf")
