"""The Docker engine the container launcher, the GPU preflight and the TensorRT check talk to.

Containers this package starts carry their owner's pid as a label, so a later run can remove
those of owners killed outright (testcontainers' Ryuk reaper needs an image that offline
machines cannot pull).
"""

from __future__ import annotations

import contextlib
import os
from types import ModuleType
from typing import Any

from pytest_triton.base.errors import ConfigError
from pytest_triton.base.processes import process_alive

OWNER_LABEL = "org.pytest-triton.owner-pid"
CPU_IMAGE = "pytest-triton-cpu:latest"


INSTALL_SDK = "pip install 'pytest-triton[container]'"


def docker_sdk_problem(module: ModuleType | None) -> str | None:
    """Why `module` (what `import docker` gave, None if nothing) is not the Docker SDK.

    A checkout's own `docker/` folder imports as a namespace package when the SDK is missing,
    and would otherwise end in "module 'docker' has no attribute 'from_env'"."""
    if module is None:
        return f"the Docker SDK is not installed: {INSTALL_SDK}"
    if not hasattr(module, "DockerClient"):
        where = ", ".join(str(p) for p in getattr(module, "__path__", ())) or repr(module)
        return (
            f"the 'docker' Python finds is not the Docker SDK but the folder {where} "
            f"(a namespace package): {INSTALL_SDK}"
        )
    return None


def docker_sdk() -> Any:
    """The docker SDK module, or a ConfigError naming what `import docker` found instead."""
    try:
        import docker
    except ImportError:
        docker = None
    problem = docker_sdk_problem(docker)
    if problem:
        raise ConfigError(
            f"the container launcher needs the Docker SDK and testcontainers; {problem}"
        )
    return docker


def docker_client(timeout_s: float = 60.0) -> Any:
    """A docker SDK client whose engine answers, or a ConfigError saying what is missing."""
    sdk = docker_sdk()
    try:
        client = sdk.DockerClient.from_env(timeout=int(timeout_s))
        client.ping()
    except Exception as exc:
        raise ConfigError(
            f"no Docker engine answers ({type(exc).__name__}: {exc}); start it "
            "(e.g. `sudo systemctl start docker`, or .ci/docker-engine in a "
            "pytest-triton checkout) and check that `docker info` works, or run "
            "without containers (--triton-launcher local)"
        ) from None
    return client


def owner_labels() -> dict[str, str]:
    return {OWNER_LABEL: str(os.getpid())}


def ensure_image(client: Any, image: str) -> None:
    """The image is here, or pulled now; otherwise say how to get it."""
    import docker.errors

    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    if image.split(":")[0] == CPU_IMAGE.split(":")[0]:
        raise ConfigError(
            f"image {image} not found: build it with images/build-cpu-image (in a pytest-triton "
            "checkout; offline, 3 minutes) or pass --triton-image"
        )
    try:
        client.images.pull(image)
    except Exception as exc:
        raise ConfigError(
            f"image {image} is not on this machine and could not be pulled ({exc}); `docker "
            "pull` it first (NGC images need `docker login nvcr.io`) or pass --triton-image"
        ) from None


def ensure_reaper(client: Any) -> None:
    """testcontainers starts its Ryuk reaper before the first container unless
    TESTCONTAINERS_RYUK_DISABLED is set; offline, its image cannot be pulled: say so first."""
    from testcontainers.core.config import testcontainers_config

    if testcontainers_config.ryuk_disabled:
        return
    try:
        ensure_image(client, testcontainers_config.ryuk_image)
    except ConfigError:
        raise ConfigError(
            f"testcontainers' reaper image {testcontainers_config.ryuk_image} is not here and "
            "cannot be pulled: set TESTCONTAINERS_RYUK_DISABLED=true (pytest-triton removes "
            "its own containers, and those of runs that were killed, itself)"
        ) from None


def reap_orphan_containers(client: Any) -> list[str]:
    """Remove containers started for processes that no longer exist: the short ids of those
    now gone, also where another run reaping at the same time removed them first."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        pid = int(container.labels.get(OWNER_LABEL, "0"))
        if pid and not process_alive(pid):
            _remove_or_see_removed(container)
            removed.append(container.short_id)
    return removed


def _remove_or_see_removed(container: Any) -> None:
    """`docker rm -f`, where another reaper may be removing the same container (409) or have
    removed it already (404): then wait until it is gone."""
    from docker.errors import APIError, NotFound

    try:
        container.remove(force=True)
    except NotFound:
        return
    except APIError as exc:
        if exc.status_code != 409:
            raise
        with contextlib.suppress(NotFound):
            container.wait(condition="removed", timeout=60)
