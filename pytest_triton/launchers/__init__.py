"""Server launchers behind one protocol: local process, container, external URL."""

from .base import Endpoints, Launcher, RunningServer, ServerArgs
from .external import ExternalLauncher
from .local import LocalLauncher

__all__ = ["Endpoints", "ExternalLauncher", "Launcher", "LocalLauncher", "RunningServer",
           "ServerArgs"]
