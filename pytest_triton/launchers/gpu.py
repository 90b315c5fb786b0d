"""--triton-gpu preflight: stop the session at once when a GPU server cannot possibly start.

A release gate that silently skips its GPU half is worse than one that fails, so each
missing piece (Docker SDK, engine, nvidia runtime, GPU) gets its own message and fix.
"""

from __future__ import annotations

import shutil
import subprocess

from ..config import TritonConfig
from ..errors import ConfigError
from .docker_engine import docker_client


def gpu_count() -> int:
    """GPUs the host driver sees, via nvidia-smi; 0 when there is no driver."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def preflight(config: TritonConfig) -> None:
    """Raise ConfigError saying which of Docker, the nvidia runtime or a GPU is missing."""
    client = docker_client()
    info = client.info()
    runtimes = set((info.get("Runtimes") or {}).keys())
    count = gpu_count()
    if count == 0:
        raise ConfigError(
            "no NVIDIA GPU found on this machine (nvidia-smi is missing or lists no GPU); run "
            "on a GPU host with the NVIDIA driver installed, or drop --triton-gpu to run the "
            "CPU suite"
        )
    if "nvidia" not in runtimes and not info.get("CDISpecDirs"):
        raise ConfigError(
            f"Docker has no nvidia runtime (runtimes: {', '.join(sorted(runtimes)) or 'none'}); "
            "install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure "
            "--runtime=docker` then restart Docker"
        )
    if config.gpus != "all":
        wanted = [int(g) for g in config.gpus.split(",") if g.strip()]
        missing = [g for g in wanted if g >= count]
        if missing:
            raise ConfigError(f"--triton-gpus {config.gpus}: GPU(s) {missing} do not exist; "
                              f"this machine has {count} (0..{count - 1})")
