"""The Docker engine and image the container tests need; the containers this process owns."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_triton.server.container import CPU_IMAGE, OWNER_LABEL, docker_client


def docker_or_skip() -> Any:
    try:
        client = docker_client()
        client.images.get(CPU_IMAGE)
    except Exception as exc:
        pytest.skip(
            f"needs a Docker engine and the {CPU_IMAGE} image (run .ci/docker-engine and "
            f"images/build-cpu-image; CI does): {exc}"
        )
    return client


def our_containers(client: Any) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={os.getpid()}"})
