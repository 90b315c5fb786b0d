"""The wheel check's file list: a wheel that lacks a file of the package fails, naming it
(make wheel-check runs the whole check; this pins how it judges a wheel's contents)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tests.helpers.check_installed import PTH, missing_from, required_files


def _wheel(path: Path, names: set[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(names):
            archive.writestr(name, "")
    return path


def test_every_file_of_the_package_is_required() -> None:
    wanted = required_files()
    assert PTH in wanted
    for name in (
        "pytest_triton/py.typed",
        "pytest_triton/repository/hosted_model.py",
        "pytest_triton/load/webui/static/triton.js",
        "pytest_triton/client/wire/_http_pump.pyi",
    ):
        assert name in wanted, name
    assert "pytest_triton/client/wire/_http_pump.c" not in wanted  # shipped compiled


def test_a_wheel_without_a_file_is_named(tmp_path: Path) -> None:
    complete = {
        n if not n.endswith("_http_pump.") else n + "cpython-311-x86_64-linux-gnu.so"
        for n in required_files()
    }
    assert missing_from(_wheel(tmp_path / "complete.whl", complete)) == []
    lacking = complete - {"pytest_triton/load/webui/static/triton.css", PTH}
    assert missing_from(_wheel(tmp_path / "lacking.whl", lacking)) == [
        "pytest_triton/load/webui/static/triton.css",
        PTH,
    ]
