"""Picks the launcher the resolved configuration asks for."""

from __future__ import annotations

from ..config import TritonConfig
from ..errors import ConfigError
from .base import Launcher
from .external import ExternalLauncher
from .local import LocalLauncher


def make_launcher(config: TritonConfig) -> Launcher:
    if config.launcher == "local":
        return LocalLauncher(config.executable)
    if config.launcher == "external":
        assert config.url is not None  # checked when the config was resolved
        return ExternalLauncher(config.url, config.grpc_url, config.backends or ("python",))
    if config.launcher == "container":
        try:  # docker and testcontainers are imported only when a container is asked for
            from .container import ContainerLauncher
        except ImportError as exc:
            raise ConfigError(f"the container launcher needs the Docker SDK and testcontainers "
                              f"({exc}): pip install 'pytest-triton[container]'") from None
        return ContainerLauncher.from_config(config)
    raise ConfigError(f"unknown launcher {config.launcher!r}")
