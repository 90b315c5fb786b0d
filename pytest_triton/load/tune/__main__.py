"""`python -m pytest_triton.load.tune`, as before triton-tune's command line moved to
pytest_triton/cli/triton_tune.py: still runs it, and says where it is now."""

import importlib
import warnings

warnings.warn(
    "python -m pytest_triton.load.tune moved to python -m pytest_triton.cli.triton_tune "
    "(or triton-tune)",
    DeprecationWarning,
    stacklevel=1,
)
# by name: the load layer does not import the command-line front end
raise SystemExit(importlib.import_module("pytest_triton.cli.triton_tune").tune_main())
