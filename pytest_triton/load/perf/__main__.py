"""`python -m pytest_triton.load.perf`, as before triton-perf's command line moved to
pytest_triton/cli/triton_perf.py: still runs it, and says where it is now."""

import importlib
import warnings

warnings.warn(
    "python -m pytest_triton.load.perf moved to python -m pytest_triton.cli.triton_perf "
    "(or triton-perf)",
    DeprecationWarning,
    stacklevel=1,
)
# by name: the load layer does not import the command-line front end
raise SystemExit(importlib.import_module("pytest_triton.cli.triton_perf").perf_main())
