"""What a server offers (backends, device, numerics, TensorRT support): known before it starts,
so the variants a repository holds and the test ids can be listed at collection."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_triton.base.config import Numerics

NO_TENSORRT = "TensorRT plans need a GPU server with the tensorrt backend: run with --triton-gpu"


@dataclass(frozen=True)
class ServerTarget:
    """What a server offers that decides the variants and how they are checked.

    `numerics`: "strict" when the server computes fp32 without TF32 (NVIDIA_TF32_OVERRIDE=0 in
    its environment), "production" when its backends use TF32 as they ship. `onnx_gpu_problem`
    says why a python-hosted ONNX model cannot run on this server's GPU (onnxruntime without
    its CUDA provider), so such variants are not offered rather than run on the CPU.
    """

    backends: frozenset[str] = frozenset({"python"})
    instance_kind: str = "KIND_CPU"  # KIND_GPU for GPU servers, KIND_AUTO when unknown
    tensorrt_problem: str | None = NO_TENSORRT
    numerics: Numerics = "strict"
    onnx_gpu_problem: str | None = None
    # The server already serves the models (--triton-deployed): one variant per spec, named
    # as the spec, checked against what is served rather than exported and loaded.
    deployed: bool = False
    # A server shared by pytest-xdist workers that upload their models: each worker loads
    # them under names of its own (mnist_onnx_gw0), so that one worker's loads, unloads and
    # statistics never touch another's.
    name_suffix: str = ""

    @property
    def gpu(self) -> bool:
        return self.instance_kind == "KIND_GPU"
