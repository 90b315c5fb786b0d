"""A real Python environment with numpy >= 2, made for the tests that check what the bundled
python backend stub does with one (a throwaway venv; no mock of numpy or of the stub)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROBE = "import numpy; print(numpy.__version__)"


def index_problem(python: Path) -> str | None:
    """Why pip cannot reach its package index from here (machines without a network, such
    as the project's GPU machine), or None when it answers for numpy."""
    try:
        done = subprocess.run(
            [
                *(str(python), "-m", "pip", "index", "versions", "numpy", "--retries", "0"),
                *("--timeout", "10", "--disable-pip-version-check"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pip could not ask its package index ({exc})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"pip's package index is not reachable from here ({said})"
    return None


def numpy_version(python: Path) -> str | None:
    done = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() if done.returncode == 0 else None


def make_numpy2_venv(root: Path) -> Path:
    """A venv whose python3 has numpy >= 2: the base interpreter's numpy when it has one
    (this project's machines ship numpy 2 there: no download), else numpy 2 installed into it
    from the package index; where no index answers, the test is skipped saying so. Returns its
    bin directory."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    venv = root / "numpy2-venv"
    subprocess.run(
        [str(base), "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        timeout=120,
    )
    python = venv / "bin" / "python3"
    version = numpy_version(python)
    if version is None or int(version.split(".")[0]) < 2:
        problem = index_problem(base)
        if problem is not None:
            pytest.skip(
                f"needs numpy >= 2 in a throwaway venv: {base} has numpy {version}, and {problem}"
            )
        site = subprocess.run(
            [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        subprocess.run(
            [str(base), "-m", "pip", "install", "-q", "--target", site, "numpy>=2,<3"],
            check=True,
            timeout=300,
        )
        version = numpy_version(python)
    assert version is not None and int(version.split(".")[0]) >= 2, version
    return venv / "bin"
