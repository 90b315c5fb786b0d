"""Every ```python block of README.md and docs/**/*.md runs, so a snippet that no longer works
fails the suite naming its page and line (rules: tests/helpers/doc_blocks.py).

A plain block runs as a script in a fresh interpreter. `# file: NAME` blocks are written into
a project directory of their own; the project's last block runs it: with pytest (the directory
as cwd and rootdir, the plugin's defaults: the embedded local server) when it has test files,
else by importing each of its modules. Projects of identical files run once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.doc_blocks import Block, Project, blocks_of, pages, projects_of

BLOCKS = [block for page in pages() for block in blocks_of(page)]
PROJECTS = {
    block: project
    for page in pages()
    for project in projects_of(blocks_of(page))
    for block in project.blocks
}
TIMEOUT_S = 600
_RUNS: dict[tuple[tuple[str, str], ...], tuple[bool, str, str]] = {}


def _env() -> dict[str, str]:
    """The suite's environment less what would make the nested run part of this one."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS"))
    }


def _run(args: list[str], cwd: Path) -> tuple[int, str]:
    done = subprocess.run(
        args,
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, (done.stdout + done.stderr)[-6000:]


def _run_project(project: Project, directory: Path) -> tuple[bool, str]:
    for name, code in project.files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    tests = [n for n in project.files if Path(n).name.startswith("test_")]
    if tests:
        rc, out = _run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "--rootdir",
                str(directory),
                str(directory),
            ],
            directory,
        )
        passed = rc == 0 and re.search(r"\b\d+ passed", out) is not None
        return passed, f"pytest exited {rc}:\n{out}"
    for name in project.files:
        if not name.endswith(".py"):
            continue
        rc, out = _run(
            [
                sys.executable,
                "-c",
                "import runpy, sys; sys.path.insert(0, '.'); "
                f"runpy.run_path({name!r}, run_name='docs_module')",
            ],
            directory,
        )
        if rc:
            return False, f"importing {name} exited {rc}:\n{out}"
    return True, ""


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_docs_block_runs(block: Block, tmp_path: Path) -> None:
    if block.skip:
        pytest.skip(f"{block.where}: {block.skip}")
    if block.file_name is None:
        script = tmp_path / "snippet.py"
        script.write_text(block.code)
        rc, out = _run([sys.executable, str(script)], tmp_path)
        assert rc == 0, f"{block.where} failed (exit {rc}):\n{out}"
        return
    try:
        compile(block.code, f"{block.where} ({block.file_name})", "exec")
    except SyntaxError as error:
        pytest.fail(f"{block.where}: {block.file_name} does not compile: {error}")
    project = PROJECTS[block]
    if block != project.blocks[-1]:
        return  # the project runs with its last block
    if project.skip:
        pytest.skip(f"{project.where}: {project.skip}")
    key = tuple(sorted(project.files.items()))
    if key not in _RUNS:
        ok, out = _run_project(project, tmp_path)
        _RUNS[key] = (ok, out, project.where)
    ok, out, first = _RUNS[key]
    same = "" if first == project.where else f" (the same files as {first})"
    assert ok, f"{project.where} failed{same}:\n{out}"


def test_the_collector_reads_the_pages_rules(tmp_path: Path) -> None:
    """Skip markers, `# file:` projects and their boundaries, as the pages are written."""
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "# A page\n\n```python\nprint(1)\n```\n\n"
        "<!-- docs-test: skip (needs a GPU: run with pytest --triton-gpu) -->\n"
        "```python\nprint(2)\n```\n\n"
        "```python\n# file: conftest.py\nA = 1\n```\n\n```bash\nls\n```\n\n"
        "```python\n# file: test_a.py\ndef test_a(): pass\n```\n\n"
        "```python\n# file: conftest.py\nB = 2\n```\n\n"
        "    ```python\n    # file: pkg/mod.py\n    C = 3\n    ```\n"
    )
    found = blocks_of(page, tmp_path)
    assert [(b.number, b.line, b.file_name) for b in found] == [
        (1, 3, None),
        (2, 8, None),
        (3, 12, "conftest.py"),
        (4, 21, "test_a.py"),
        (5, 26, "conftest.py"),
        (6, 31, "pkg/mod.py"),
    ]
    assert found[1].skip == "needs a GPU: run with pytest --triton-gpu" and found[0].skip is None
    assert found[5].code == "# file: pkg/mod.py\nC = 3\n"
    assert found[3].id == "docs/page.md#4:L21"
    projects = projects_of(found)
    assert [[b.number for b in p.blocks] for p in projects] == [[3, 4], [5, 6]]
    assert "lines 12, 21" in projects[0].where
    (tmp_path / "docs" / "open.md").write_text("```python\nprint(1)\n")
    with pytest.raises(ValueError, match=r"docs/open.md: the python block at line 1"):
        blocks_of(tmp_path / "docs" / "open.md", tmp_path)
