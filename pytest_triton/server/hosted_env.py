"""The Python environment python-hosted models run in, checked before any model loads.

The bundled server's python backend stub embeds libpython and finds its environment from the
first `python3` on the server's PATH (the local launcher puts this interpreter's directory
first). That stub (Triton 2.51) answers EVERY request with empty outputs when the environment
has numpy >= 2 (on CPU and on GPU alike), so a session stops with the fix instead.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Mapping

from pytest_triton.base.errors import ConfigError

NO_CUDA_PROVIDER = "onnxruntime has no CUDAExecutionProvider: install onnxruntime-gpu"
_PROBE = "import sys, numpy; print(numpy.__version__); print(sys.prefix)"


def stub_interpreter(environ: Mapping[str, str]) -> str | None:
    """The python3 the stub embeds: the first on the server's PATH."""
    return shutil.which("python3", path=environ.get("PATH", ""))


@functools.lru_cache(maxsize=8)
def _numpy_of(python: str, environ: tuple[tuple[str, str], ...]) -> tuple[str | None, str]:
    """(numpy version or None, sys.prefix or the import error) of an interpreter, run in the
    server's environment less PYTHONPATH (which the stub ignores)."""
    env = {k: v for k, v in environ if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=60, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) < 2:
        return None, (done.stderr.strip().splitlines() or ["no output"])[-1]
    return lines[0], lines[1]


def stub_numpy_problem(environ: Mapping[str, str]) -> str | None:
    """Why the bundled stub cannot answer from this environment, or None."""
    python = stub_interpreter(environ)
    if python is None:
        return (
            "the python backend stub embeds the first python3 on the server's PATH, and "
            "there is none"
        )
    version, detail = _numpy_of(python, tuple(sorted(environ.items())))
    if version is None:
        return (
            f"the python backend stub takes its packages from {python}, which cannot import "
            f"numpy ({detail}): {python} -m pip install 'numpy<2'"
        )
    if int(version.split(".")[0]) >= 2:
        return (
            f"the python backend stub of the bundled tritonserver takes its packages from "
            f"{python} (sys.prefix {detail}), which has numpy {version}; with numpy >= 2 "
            f"this stub answers every request with empty outputs: {python} -m pip install "
            "'numpy<2'"
        )
    return None


def check_stub_numpy(environ: Mapping[str, str]) -> None:
    problem = stub_numpy_problem(environ)
    if problem:
        raise ConfigError(problem)


@functools.cache
def onnx_cuda_problem() -> str | None:
    """Why a python-hosted ONNX model here could not run on a GPU (the stub imports the same
    environment's onnxruntime), or None."""
    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime is not installed: install onnxruntime-gpu"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return NO_CUDA_PROVIDER
    return None
