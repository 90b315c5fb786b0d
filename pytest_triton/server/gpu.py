"""--triton-gpu: which launcher can run a GPU server here, and a preflight that stops the session
at once, naming what the chosen launcher lacks.

A release gate that silently skips its GPU half is worse than one that fails. GPU is a mode of
every launcher: a container (Docker with the nvidia runtime), a local tritonserver on a visible
GPU (CI runners without Docker, jobs inside the NGC image), or an external GPU server. The
decision is a pure function of probed facts (`choose_launcher`), so every branch is testable on a
machine without a GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.server.docker_engine import docker_client

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
_DEVICE_NODE = re.compile(r"nvidia\d+$")
HIDDEN = ("", "-1", "none", "nodevfiles", "void")  # CUDA_VISIBLE_DEVICES values that hide all


@dataclass(frozen=True)
class GpuVisibility:
    """How many NVIDIA GPUs this process can use, and the evidence (for messages)."""

    count: int
    evidence: str


def visible_gpus(
    environ: dict[str, str] | None = None, proc_gpus: Path = PROC_GPUS, dev: Path = Path("/dev")
) -> GpuVisibility:
    """Cheap checks first: CUDA_VISIBLE_DEVICES hiding every GPU, the driver's /proc entries and
    /dev/nvidiaN nodes (both present inside GPU containers and Kubernetes pods); nvidia-smi
    only when neither says anything."""
    env = os.environ if environ is None else environ
    hidden = env.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip().lower() in HIDDEN:
        return GpuVisibility(0, f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU")
    listed = [d for d in hidden.split(",") if d.strip()] if hidden is not None else None
    found, evidence = 0, ""
    if proc_gpus.is_dir() and (entries := list(proc_gpus.iterdir())):
        found, evidence = len(entries), f"{proc_gpus} lists {len(entries)}"
    elif dev.is_dir() and (nodes := [p for p in dev.iterdir() if _DEVICE_NODE.match(p.name)]):
        found, evidence = len(nodes), f"{dev}/nvidia* has {len(nodes)} device node(s)"
    else:
        found, evidence = _nvidia_smi()
    if found and listed is not None:
        return GpuVisibility(
            min(found, len(listed)), f"{evidence}; CUDA_VISIBLE_DEVICES={hidden!r}"
        )
    return GpuVisibility(found, evidence)


def _nvidia_smi() -> tuple[int, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0, f"no NVIDIA driver: no {PROC_GPUS}, no /dev/nvidia*, no nvidia-smi on PATH"
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"nvidia-smi -L failed ({exc})"
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return count, f"nvidia-smi -L lists {count}" + (
        f" ({out.stderr.strip()[:200]})" if not count and out.stderr else ""
    )


def docker_gpu_problem(timeout_s: float = 10.0) -> str | None:
    """None when a Docker engine with the nvidia runtime (or CDI devices) answers; else what
    is missing: the SDK, the engine, or the runtime, each with its fix."""
    try:
        info = docker_client(timeout_s).info()
    except ConfigError as exc:
        return str(exc)
    runtimes = set((info.get("Runtimes") or {}).keys())
    if "nvidia" not in runtimes and not info.get("CDISpecDirs"):
        return (
            f"Docker has no nvidia runtime (runtimes: {', '.join(sorted(runtimes)) or 'none'}"
            "); install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure "
            "--runtime=docker`, then restart Docker"
        )
    return None


def no_gpu_message(gpus: GpuVisibility) -> str:
    return (
        f"--triton-gpu needs an NVIDIA GPU, and none is visible here ({gpus.evidence}); run "
        "on a GPU host with the NVIDIA driver (or in a container given its GPUs), or drop "
        "--triton-gpu to run the CPU suite"
    )


def choose_launcher(gpus: GpuVisibility, docker_problem: str | None) -> str:
    """`--triton-launcher auto` with --triton-gpu: the container when a GPU is visible and a
    Docker engine with the nvidia runtime answers, else a local server on the visible GPU.
    Without a GPU it is the GPU that is missing, whatever Docker says."""
    if gpus.count == 0:
        raise ConfigError(no_gpu_message(gpus))
    return "container" if docker_problem is None else "local"


def check_gpu_ordinals(wanted: str, gpus: GpuVisibility) -> None:
    if wanted == "all":
        return
    missing = [int(g) for g in wanted.split(",") if int(g) >= gpus.count]
    if missing:
        raise ConfigError(
            f"--triton-gpus {wanted}: GPU(s) {missing} do not exist; this machine "
            f"has {gpus.count} (0..{gpus.count - 1}; {gpus.evidence})"
        )


def torch_cuda_problem() -> str | None:
    """The PyTorch reference of a GPU variant runs on CUDA in this process."""
    import torch

    if torch.cuda.is_available():
        return None
    cuda = torch.version.cuda
    build = "a CPU-only build" if cuda is None else f"built for CUDA {cuda}"
    return (
        f"the PyTorch reference of GPU variants runs on CUDA here, but torch "
        f"{torch.__version__} ({build}) sees no CUDA device: install a CUDA build of torch"
    )


def preflight(config: TritonConfig, launcher: str, gpus: GpuVisibility | None = None) -> None:
    """What `launcher` needs to serve on a GPU, checked in the order it needs it; a
    ConfigError names the first thing missing. An external server's GPU cannot be seen from
    here: only the reference's CUDA is checked."""
    if launcher in ("local", "container"):
        gpus = gpus or visible_gpus()
        if launcher == "container":
            problem = docker_gpu_problem()
            if problem:
                raise ConfigError(problem)
        if gpus.count == 0:
            raise ConfigError(no_gpu_message(gpus))
        check_gpu_ordinals(config.server.gpus, gpus)
    problem = torch_cuda_problem()
    if problem:
        raise ConfigError(problem)
