"""Option values as the docs write them: a --triton-server-args value that begins with '--'
given as its own word (`--triton-server-args "--repository-poll-secs=1"`; a pytest run with it
starts a server in tests/load/test_refusals.py, whose pytester run is paid for already), and
MODULE:CALLABLE references to a module in the current directory, found as `python -m` does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_triton.base.errors import ConfigError
from pytest_triton.base.importing import load_object
from pytest_triton.base.setting_sources import join_dash_values


def test_a_value_that_begins_with_dashes_is_joined_to_its_flag() -> None:
    given = ["-x", "--triton-server-args", "--repository-poll-secs=1", "--triton-gpu"]
    assert join_dash_values(given) == [
        "-x",
        "--triton-server-args=--repository-poll-secs=1",
        "--triton-gpu",
    ]
    words = ["--triton-server-args", "--log-info=true --exit-timeout-secs=5"]
    assert join_dash_values(words) == ["--triton-server-args=" + words[1]]
    kept = ["--triton-server-args=--a=1", "--triton-url", "http://h:1"]
    assert join_dash_values(kept) == kept


def test_a_module_in_the_current_directory_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As an installed command runs (its own folder first on sys.path, not the current
    directory): `-m my_specs:factory` beside my_specs.py is found; a missing one says where
    it looked."""
    (tmp_path / "my_specs_here.py").write_text("def factory():\n    return 'made here'\n")
    monkeypatch.chdir(tmp_path)
    outside = [p for p in sys.path if p not in ("", ".", str(tmp_path))]
    monkeypatch.setattr(sys, "path", outside)
    monkeypatch.delitem(sys.modules, "my_specs_here", raising=False)
    assert load_object("my_specs_here:factory")() == "made here"
    sys.modules.pop("my_specs_here", None)
    with pytest.raises(ConfigError, match=r"No module named 'not_here'.*current directory"):
        load_object("not_here:factory")
