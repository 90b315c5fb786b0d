"""Whether TensorRT plans can be built here for a given server image.

A serialized plan loads only in the TensorRT version that built it (and on the same GPU
architecture), so the check is: the `tensorrt` Python package here has the same
major.minor.patch as the libnvinfer inside the server image.
"""

from __future__ import annotations

import functools
import glob
import re

_LIBNVINFER = re.compile(r"libnvinfer\.so\.(\d+\.\d+\.\d+)")


def local_version() -> str | None:
    try:
        import tensorrt
    except ImportError:
        return None
    return str(tensorrt.__version__)


@functools.lru_cache(maxsize=8)
def image_version(image: str) -> str | None:
    """TensorRT's version in a server image, read off its libnvinfer file name."""
    from pytest_triton.server.docker_engine import docker_client

    output = docker_client().containers.run(
        image,
        entrypoint="sh",
        command=[
            "-c",
            "ls /usr/lib/*/libnvinfer.so.* /usr/local/tensorrt/lib/libnvinfer.so.* "
            "2>/dev/null; true",
        ],
        remove=True,
        stdout=True,
        stderr=False,
    )
    versions = _LIBNVINFER.findall(bytes(output).decode(errors="replace"))
    return max(versions, key=lambda v: tuple(int(p) for p in v.split("."))) if versions else None


def host_version() -> str | None:
    """TensorRT's version on this machine (a local tritonserver inside the NGC image)."""
    found = [
        m.group(1)
        for pattern in ("/usr/lib/*/libnvinfer.so.*", "/usr/local/tensorrt/lib/libnvinfer.so.*")
        for path in glob.glob(pattern)
        if (m := _LIBNVINFER.search(path))
    ]
    return max(found, key=lambda v: tuple(int(p) for p in v.split("."))) if found else None


def same_release(a: str, b: str) -> bool:
    return a.split(".")[:3] == b.split(".")[:3]


def plan_problem(image: str, local: str | None, server: str | None) -> str | None:
    """None when plans built here will load in `image`; else what to do about it."""
    if server is None:
        return f"no TensorRT library found in {image}; the tensorrt variant needs an NGC image"
    if local is None:
        return (
            f"the tensorrt Python package is not installed: pip install tensorrt=={server} "
            f"(the TensorRT of {image}) to build plans; the onnx-trt variant still runs"
        )
    if not same_release(local, server):
        return (
            f"tensorrt {local} is installed but {image} has TensorRT {server}: a plan loads "
            f"only in the TensorRT that built it; pip install tensorrt=={server}"
        )
    return None
