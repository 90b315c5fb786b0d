"""`python -m pytest_triton.load.tune`, as before triton-tune's command line moved to
pytest_triton/cli/triton_tune.py: still runs it, and says where it is now."""

from pytest_triton.base.moved import run_moved_command

run_moved_command("load.tune", "cli.triton_tune", "tune_main", "triton-tune")
