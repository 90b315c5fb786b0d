"""Server layer: launchers behind one protocol (local process, container, external URL), the
GPU preflight, and readiness with the server's log on failure.

Rule: imports `base`, `client`, `parity`, `repository` and `models` only where a launcher
needs them; never `session` or a front end.
"""

from pytest_triton.base.urls import Endpoints
from pytest_triton.server.external import ExternalLauncher
from pytest_triton.server.launcher import Launcher, RunningServer, ServerArgs
from pytest_triton.server.local import LocalLauncher

__all__ = [
    "Endpoints",
    "ExternalLauncher",
    "Launcher",
    "LocalLauncher",
    "RunningServer",
    "ServerArgs",
]
