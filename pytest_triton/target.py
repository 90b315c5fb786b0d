"""What a server offers (backends, device, TensorRT support): known before it starts, so
the variants a repository holds and the test ids can be listed at collection."""

from __future__ import annotations

from dataclasses import dataclass

NO_TENSORRT = "TensorRT plans need a GPU server with the tensorrt backend: run with --triton-gpu"


@dataclass(frozen=True)
class ServerTarget:
    """What a server offers that decides the variants: backends, device, TensorRT support."""

    backends: frozenset[str] = frozenset({"python"})
    instance_kind: str = "KIND_CPU"  # KIND_GPU for GPU servers, KIND_AUTO when unknown
    tensorrt_problem: str | None = NO_TENSORRT

    @property
    def gpu(self) -> bool:
        return self.instance_kind == "KIND_GPU"
