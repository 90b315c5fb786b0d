"""Picks the launcher the resolved configuration asks for; with --triton-gpu, the one that can
run a GPU server here (server/gpu.py), after checking that it has what it needs."""

from __future__ import annotations

import os

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import client_security
from pytest_triton.base.errors import ConfigError
from pytest_triton.server.docker_engine import docker_sdk
from pytest_triton.server.external import ExternalLauncher
from pytest_triton.server.launcher import Launcher
from pytest_triton.server.local import LocalLauncher


def launcher_name(config: TritonConfig) -> str:
    """The launcher that will run: the configured one, or for auto with --triton-gpu the one this
    machine can run a GPU server with (checked as it is chosen)."""
    if not config.server.gpu:
        return config.server.launcher
    from pytest_triton.server import gpu

    if config.server.launcher == "auto":
        visible = gpu.visible_gpus()
        name = gpu.choose_launcher(
            visible, None if visible.count == 0 else gpu.docker_gpu_problem()
        )
        gpu.preflight(config, name, visible)
        return name
    gpu.preflight(config, config.server.launcher)
    return config.server.launcher


def shared_server_suffix() -> str:
    """pytest-xdist's workers share an external server: each uploads its models under names
    of its own ("_gw0"); one pytest process is alone on its servers."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"_{worker}" if worker else ""


def make_launcher(config: TritonConfig) -> Launcher:
    name = launcher_name(config)
    if name == "local":
        launcher = LocalLauncher(
            config.server.executable,
            gpus=config.server.gpus if config.server.gpu else None,
            numerics=config.server.numerics,
        )
        launcher.check_environment()  # the stub's numpy: at collection, before any load
        return launcher
    if name == "external":
        assert config.server.url is not None  # checked when the config was resolved
        return ExternalLauncher(
            config.server.url,
            config.server.grpc_url,
            config.server.backends or ("python",),
            gpu=config.server.gpu,
            numerics=config.server.numerics,
            deployed=config.server.deployed,
            security=client_security(config),
            name_suffix=shared_server_suffix(),
        )
    if name == "container":
        docker_sdk()  # names a missing SDK (or a `docker/` folder) before testcontainers fails
        try:  # docker and testcontainers are imported only when a container is asked for
            from pytest_triton.server.container import ContainerLauncher
        except ImportError as exc:
            raise ConfigError(
                f"the container launcher needs the Docker SDK and testcontainers "
                f"({exc}): pip install 'pytest-triton[container]'"
            ) from None
        return ContainerLauncher.from_config(config)
    raise ConfigError(f"unknown launcher {name!r}")
