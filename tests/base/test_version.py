"""One version, written once (pyproject.toml), shown everywhere a user looks: the package,
every command's `--version` and the gate report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import pytest_triton
from pytest_triton.gate import document as gd
from pytest_triton.gate.environment import environment
from pytest_triton.gate.markdown import render
from tests.helpers.locust_runs import REPO, subprocess_env

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
SCRIPTS = PYPROJECT["project"]["scripts"]


def test_the_package_version_is_pyprojects() -> None:
    assert VERSION == "1.0.0"
    assert pytest_triton.__version__ == VERSION


@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_every_command_says_its_version(command: str) -> None:
    """Through the installed console script (triton-perf imports locust: not in this
    process)."""
    script = Path(sys.executable).with_name(command)
    done = subprocess.run(
        [str(script), "--version"],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"{command} {VERSION}"


def test_the_gate_report_names_the_version_that_judged_it() -> None:
    doc = gd.build_document(
        gd.Collected(parity=[]),
        environment=environment(),
        load_runs=[],
        problems=[],
        exit_status=0,
        duration_s=1.0,
        junit=None,
    )
    assert doc["environment"]["packages"]["pytest-triton"] == VERSION
    lines = render(gd.decide(doc)).splitlines()
    assert lines[2] == f"Gated by pytest-triton {VERSION}."
