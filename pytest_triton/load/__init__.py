"""The load engine: load tests of Triton-served models.

`users` (and `sequence_users`, `stream_users`) is what a locustfile imports (`TritonUser`,
`zoo_model`); `runner/` runs inside Locust's processes, `webui/` is the web UI's Triton tab,
`perf/` is triton-perf's sweep, `tune/` is triton-tune's search (it measures with triton-perf's
generator), and `measure/` is what they all measure with. The command lines of triton-perf
and triton-tune are in `cli/`.

Rules: imports the layers below it (session and down), never `plugin` or `cli`; imported by
`cli` and the locustfiles, never by pytest's plugin; only `users`, `runner/`, `webui/` and
`perf/` import locust (it monkey-patches the process with gevent); nothing here imports pytest.
"""

import importlib
from typing import Any

from pytest_triton.base.grpc_fork import without_grpc_fork_handlers

without_grpc_fork_handlers()  # before the users import grpc (base/grpc_fork.py says why)

LOCUSTFILE_HELPERS = (
    "EmbeddedModel",
    "GrpcTritonUser",
    "HttpTritonUser",
    "TritonUser",
    "default_targets",
    "zoo_model",
)
"""What a locustfile imports (`from pytest_triton.load import TritonUser`, or from
`pytest_triton.load.users`): the public surface of the Locust front end."""


def __getattr__(name: str) -> Any:
    """The locustfile helpers, imported on first use: `pytest_triton.load.users` imports
    locust, which patches the process with gevent, so only a locustfile may pay for it."""
    if name in LOCUSTFILE_HELPERS:
        return getattr(importlib.import_module("pytest_triton.load.users"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(LOCUSTFILE_HELPERS)
