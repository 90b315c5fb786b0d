"""The package's layers, kept by walking its imports: no cycles, faces never import each other,
what a server offers sits below launchers and repository, and the load package stays small
and free of pytest. One settings table feeds every front end."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_triton.config import SETTINGS, settings_for

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_triton"
FACES = {
    "pytest": ("pytest_triton.plugin", "pytest_triton.factories", "pytest_triton.reporting"),
    "locust": ("pytest_triton.load",),
    "deploy": ("pytest_triton.cli",),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """pytest_triton modules a file imports, at module level or inside functions."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("pytest_triton")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("pytest_triton"):
                continue
            for alias in node.names:  # `from . import x` may name a module
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in MODULES else target)
    return {m for m in found if m in MODULES and m != name}


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {name: imports(path) for name, path in MODULES.items()}


def reaches(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def in_face(module: str, face: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in FACES[face])


def test_no_import_cycles() -> None:
    cycles = sorted(m for m in GRAPH if m in reaches(m))
    assert not cycles, f"modules on an import cycle: {cycles}"


@pytest.mark.parametrize("face", FACES)
def test_faces_never_import_each_other(face: str) -> None:
    others = [f for f in FACES if f != face]
    bad = sorted((m, dep) for m in GRAPH if in_face(m, face) for dep in GRAPH[m]
                 if any(in_face(dep, o) for o in others))
    assert not bad, f"the {face} face imports another face: {bad}"


def test_what_a_server_offers_sits_below_launchers_and_repository() -> None:
    launchers = [m for m in GRAPH if m.startswith("pytest_triton.launchers")]
    repository = [m for m in GRAPH if m.startswith("pytest_triton.repository")]
    assert not [(m, d) for m in launchers for d in GRAPH[m] if d in repository]
    assert not [(m, d) for m in repository for d in GRAPH[m] if d in launchers]
    assert "pytest_triton.target" in GRAPH["pytest_triton.launchers.base"]
    assert "pytest_triton.target" in GRAPH["pytest_triton.repository.variants"]


def test_the_gate_report_reads_documents_only() -> None:
    """pytest_triton.gate turns recorded results and load files into the report: no face, no
    server, no pytest and no locust, so any front end (or a script) can use it."""
    gate = [m for m in GRAPH if m.startswith("pytest_triton.gate")]
    assert gate
    allowed = set(gate)
    assert not [(m, d) for m in gate for d in GRAPH[m] if d not in allowed]
    for module in gate:
        tree = ast.parse(MODULES[module].read_text())
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
        roots |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and not n.level}
        assert not roots & {"pytest", "_pytest", "locust", "gevent"}, (module, roots)


def test_load_modules_stay_small() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()
             if m.startswith("pytest_triton.load")}
    assert {m: n for m, n in sizes.items() if n > 250} == {}


def test_the_locust_process_imports_no_pytest() -> None:
    code = ("import sys, locust, pytest_triton.load.users, pytest_triton.load._generator; "
            "bad = sorted(m for m in sys.modules if m == 'pytest' or m.startswith('_pytest')); "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-2000:]


# -- one settings table, every front end ----------------------------------------------------
def test_every_setting_reaches_each_of_its_front_ends() -> None:
    """pytest --help is checked in test_plugin; here Locust's own parser and triton-perf's."""
    code = """
import sys, locust.argument_parser as ap
from pytest_triton.load.options import add_options
parser = ap.get_parser()
add_options(parser)
print(parser.format_help())
print("=====")
from pytest_triton.load.sweep import _parser
print(_parser().format_help())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    locust_help, perf_help = done.stdout.split("=====")
    for setting in settings_for("locust"):
        if not setting.internal:
            assert setting.cli in locust_help and setting.env in locust_help, setting.name
    for setting in settings_for("perf"):
        assert setting.cli in perf_help, setting.name
    assert {s.fronts and True for s in SETTINGS} == {True}  # every row serves somebody
