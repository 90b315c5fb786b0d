"""`locust -f LOCUSTFILE --help` lists our options, although Locust prints its help before it
imports the locustfile (pytest_triton_locust.pth imports our options for --help only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytest_triton.base.config import settings_for

REPO = Path(__file__).resolve().parents[2]
LOCUST = Path(sys.executable).parent / "locust"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_locust_help_lists_every_locust_setting() -> None:
    done = run(str(LOCUST), "-f", "locustfiles/dlrm.py", "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    missing = [
        s.cli
        for s in settings_for("locust")
        if not s.internal and (s.cli not in done.stdout or s.env not in done.stdout)
    ]
    assert missing == [], f"locust --help lacks {missing} (is pytest_triton_locust.pth installed?)"


def test_other_interpreters_do_not_import_the_package() -> None:
    """The .pth line runs in every interpreter of the environment: it must stay a no-op there."""
    done = run(sys.executable, "-c", "import sys; print('pytest_triton' in sys.modules)")
    assert done.stdout.strip() == "False", done.stderr
    done = run(str(LOCUST), "--version")
    assert done.returncode == 0 and "locust" in done.stdout, done.stderr
