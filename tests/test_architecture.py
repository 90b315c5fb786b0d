"""The package's layers, kept by walking its imports: one folder per layer, each importing
only from the layers below it; front ends never import each other; the gate report reads
documents only; load/measure and the Locust process stay free of what they must not load.
One settings table feeds every front end."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import pytest_triton
from pytest_triton.base.config import BY_NAME, ENV_FRONTS, SETTINGS, Front, settings_for
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_sources import check_environ, foreign_variables

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_triton"
# Bottom to top: a layer may import itself and the layers before it. Front ends sit above
# them all and never import each other. `load` is the load engine (Locust's side, the sweep,
# the search) that the locustfiles and the command-line tools drive; pytest's plugin never
# imports it (it imports locust, which patches the process with gevent).
LAYERS = (
    "base",
    "client",
    "parity",
    "accuracy",
    "repository",
    "models",
    "server",
    "session",
    "load",
    "gate",
)
FRONTS = ("plugin", "cli")
ROOT_FILES = {"__init__.py", "py.typed"}


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
                base = base[: len(base) - node.level + 1]
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


def layer(module: str) -> str:
    """The top-level folder a module lives in ('' for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def rank(name: str) -> int:
    return LAYERS.index(name) if name in LAYERS else len(LAYERS)


def import_roots(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    roots = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    return roots | {
        (n.module or "").split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and not n.level
    }


def test_no_import_cycles() -> None:
    cycles = sorted(m for m in GRAPH if m in reaches(m))
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_the_package_root_holds_only_the_layers() -> None:
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.name not in ROOT_FILES)
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert loose == []
    assert folders == set(LAYERS) | set(FRONTS)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    bad = sorted(
        (m, dep)
        for m in GRAPH
        if layer(m)
        for dep in GRAPH[m]
        if layer(dep) != layer(m) and rank(layer(dep)) >= rank(layer(m))
    )
    assert not bad, f"imports of a layer at or above the importer's: {bad}"


@pytest.mark.parametrize("name", [*LAYERS, *FRONTS])
def test_every_layer_states_its_rule(name: str) -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
    assert doc and "Rule" in doc, f"pytest_triton/{name}/__init__.py states no layer rule"


def test_no_module_is_named_like_the_stdlib_or_another_module() -> None:
    leaves: dict[str, list[str]] = defaultdict(list)
    for module in MODULES:
        if module != "pytest_triton":
            leaves[module.rsplit(".", 1)[-1]].append(module)
    assert sorted(n for n in leaves if n in sys.stdlib_module_names) == []
    assert {n: ms for n, ms in leaves.items() if len(ms) > 1 and n != "__main__"} == {}


# Every zoo model module offers these (pytest_triton/models/__init__.py): one interface.
ZOO_INTERFACE = {"build", "construct", "example_inputs"}


def test_no_two_public_functions_share_a_name() -> None:
    owners: dict[str, list[str]] = defaultdict(list)
    for module, path in MODULES.items():
        zoo = module.startswith("pytest_triton.models.")
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.FunctionDef)
                and not node.name.startswith(("_", "pytest_"))
                and not (zoo and node.name in ZOO_INTERFACE)
            ):
                owners[node.name].append(module)
    assert {n: ms for n, ms in owners.items() if len(ms) > 1} == {}


def test_the_gate_report_reads_documents_only() -> None:
    """pytest_triton.gate turns recorded results and load files into the report: no front end, no
    server, no pytest and no locust, so any front end (or a script) can use it (the package's
    errors and its version aside)."""
    gate = [m for m in GRAPH if m.startswith("pytest_triton.gate")]
    assert gate
    allowed = {*gate, "pytest_triton.base.errors", "pytest_triton.base.version"}
    assert not [(m, d) for m in gate for d in GRAPH[m] if d not in allowed]
    for module in gate:
        roots = import_roots(module)
        assert not roots & {"pytest", "_pytest", "locust", "gevent"}, (module, roots)


def test_the_pytest_plugin_imports_no_load_module() -> None:
    plugin = [m for m in MODULES if layer(m) == "plugin"]
    assert plugin
    for module in plugin:
        assert not {d for d in reaches(module) if layer(d) == "load"}, module


def test_load_measure_imports_no_locust() -> None:
    """What a run measured is read by pytest and the gate too: no locust, gevent or pytest."""
    measure = [m for m in MODULES if m.startswith("pytest_triton.load.measure")]
    assert measure
    for module in measure:
        assert not import_roots(module) & {"locust", "gevent", "pytest"}, module
        assert all(
            d.startswith("pytest_triton.load.measure") or layer(d) != "load" for d in GRAPH[module]
        ), module


def test_the_locust_process_imports_no_pytest_and_no_torch() -> None:
    """torch costs a Locust process seconds of start-up: only a locustfile that serves or
    checks a PyTorch module of its own imports it."""
    code = (
        "import sys, locust, pytest_triton, pytest_triton.load.users, "
        "pytest_triton.load.perf.generator; "
        "bad = sorted(m for m in sys.modules if m in ('pytest', 'torch') "
        "or m.startswith(('_pytest', 'torch.'))); "
        "assert not bad, bad"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PACKAGE.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]


# -- one settings table, every front end ----------------------------------------------------
FRONT_PARSERS = """
import contextlib, io, json, sys
import locust.argument_parser as ap
from pytest_triton.base.config import SETTINGS
from pytest_triton.load.runner.options import add_options
from pytest_triton.cli.triton_perf import _parser as perf_parser
from pytest_triton.cli.triton_tune import _parser as tune_parser
from pytest_triton.cli.deploy import deployer_parser
from pytest_triton.plugin.hooks import pytest_addoption

locust_parser = ap.get_parser()
add_options(locust_parser)
parsers = {"locust": locust_parser, "perf": perf_parser(), "tune": tune_parser(),
           "deploy": deployer_parser()}
for front in ("locust", "perf", "tune"):
    print(parsers[front].format_help())
    print("=====")
required = {"locust": [], "perf": ["-m", "dlrm"], "tune": ["-m", "dlrm"], "deploy": ["--onnx"]}
taken = {}
for front, parser in parsers.items():
    found = []
    for s in SETTINGS:
        argv = required[front] + ([s.cli] if s.flag else [s.cli, "1"])
        with contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                _, extra = parser.parse_known_args(argv)
            except SystemExit:  # refused by name (Locust's parser)
                assert s.cli in err.getvalue(), (front, err.getvalue())
                continue
        if s.cli not in extra:
            found.append(s.name)
    taken[front] = found
class Recorder:
    def __init__(self): self.flags = []
    def getgroup(self, *a, **k): return self
    def addoption(self, *flags, **k): self.flags.extend(flags)
    def addini(self, *a, **k): pass
recorder = Recorder()
pytest_addoption(recorder)
taken["pytest"] = [s.name for s in SETTINGS if s.cli in recorder.flags]
refusals = {}
for front, parser in parsers.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        parser.parse_args(required[front] + ["--triton-specs", "m:specs"])  # pytest's only
    refusals[front] = err.getvalue()
print(json.dumps({"taken": taken, "refusals": refusals}))
"""


@pytest.fixture(scope="module")
def front_parsers() -> str:
    """Every front end's parser, asked in one subprocess (importing Locust here would patch
    pytest's process with gevent): the standalone tools' --help, then what each takes."""
    done = subprocess.run(
        [sys.executable, "-c", FRONT_PARSERS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PACKAGE.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_every_setting_reaches_each_of_its_front_ends(front_parsers: str) -> None:
    """pytest --help is checked in test_plugin; here Locust's own parser, triton-perf's and
    triton-tune's."""
    locust_help, perf_help, tune_help, _ = front_parsers.split("=====")
    for setting in settings_for("locust"):
        if not setting.internal:
            assert setting.cli in locust_help and setting.env in locust_help, setting.name
    for setting in settings_for("perf"):
        assert setting.cli in perf_help, setting.name
    for setting in settings_for("tune"):
        assert setting.cli in tune_help, setting.name
    assert "--triton-launcher" in tune_help and "--triton-launcher" not in perf_help
    assert {s.fronts and True for s in SETTINGS} == {True}  # every row serves somebody


def test_a_setting_given_where_it_is_not_taken_is_refused_on_every_front_end(
    front_parsers: str,
) -> None:
    """Walk the table for every front end: the flag of a setting it does not take is not one
    of its options (argparse then stops naming it; a real refusal of each parser is shown),
    and a TRITON_* variable it would ignore is refused naming the variable."""
    seen = json.loads(front_parsers.strip().splitlines()[-1])
    for front, names in seen["taken"].items():
        expected = {s.name for s in SETTINGS if front in s.fronts}
        if front == "deploy":  # its parser also has flags of its own, named as NVIDIA's
            assert expected <= set(names), front
        else:
            assert set(names) == expected, front
    for front, text in seen["refusals"].items():
        assert "--triton-specs" in text, (front, text)
    # GPU mode reaches every front end that starts a server
    for name in ("gpu", "gpus", "numerics"):
        assert {"pytest", "locust", "perf", "tune"} <= BY_NAME[name].fronts, name
    fronts: tuple[Front, ...] = ("pytest", "locust", "perf", "tune", "deploy")
    for front in fronts:
        for setting in SETTINGS:
            if setting.internal:
                continue
            environ = {setting.env: "1"}
            reads = front in ENV_FRONTS and front in setting.fronts
            ignored = front not in setting.fronts and front not in ENV_FRONTS
            if reads or ignored:  # read, or left to the load tools a pytest session runs
                assert foreign_variables(environ, front) == [], (front, setting.name)
                continue
            with pytest.raises(ConfigError, match=setting.env):
                check_environ(environ, front)
    with pytest.raises(ConfigError, match="locust does not take --triton-launcher"):
        check_environ({"TRITON_LAUNCHER": "container", "TRITON_GPU": "1"}, "locust")
    with pytest.raises(ConfigError, match="pass --triton-gpu"):
        check_environ({"TRITON_GPU": "1"}, "pytest")
    check_environ({"TRITON_GPU": "1", "TRITON_TOKEN": "x", "TRITON_GPU_RUNNER": "y"}, "perf")


TESTS = PACKAGE.parent / "tests"
# Tests of the whole project rather than of one layer, and the suites that cut across layers.
PROJECT_TESTS = {  # the suite's own tools and the project's files
    "test_architecture.py",
    "test_ci_files.py",
    "test_cpu_log.py",
    "test_docs.py",
    "test_schedule.py",
    "test_warm_start.py",
}
CROSS_CUTTING = {"docs", "helpers", "reliability", "wheel"}  # docs: the pages' examples, run;
# wheel: the package as installed


def test_tests_are_laid_out_like_the_package() -> None:
    """tests/LAYER/ tests pytest_triton/LAYER/; shared helpers live in tests/helpers/ only."""
    folders = {p.name for p in TESTS.iterdir() if (p / "__init__.py").is_file()}
    assert folders - CROSS_CUTTING <= set(LAYERS) | set(FRONTS)
    assert {p.name for p in TESTS.glob("test_*.py")} == PROJECT_TESTS
    stray = sorted(
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("*.py")
        if p.parts[len(TESTS.parts)] != "helpers"
        and not p.name.startswith("test_")
        and p.name not in {"__init__.py", "conftest.py"}
    )
    assert stray == [], f"helpers outside tests/helpers/: {stray}"


def test_every_error_is_a_package_error() -> None:
    """A caller catches TritonTestError and gets every failure the package raises. Read from
    the source (importing the Locust modules here would patch pytest's process with gevent)."""
    import builtins

    bases: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = [
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                ]
                bases[node.name] = names
                where[node.name] = module

    def derives(name: str, root: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == root:
            return True
        return any(derives(b, root, seen | {name}) for b in bases.get(name, []) if b not in seen)

    def is_exception(name: str) -> bool:
        builtin = getattr(builtins, name, None)
        if isinstance(builtin, type) and issubclass(builtin, BaseException):
            return True
        return any(is_exception(b) for b in bases.get(name, []))

    outside = sorted(
        f"{where[name]}.{name}"
        for name in bases
        if not name.startswith("_")
        and is_exception(name)
        and not derives(name, "TritonTestError")
        and name != "TritonTestError"
    )
    assert outside == []


# -- the layout as documented, and no old name left ------------------------------------------
ARCHITECTURE_DOC = PACKAGE.parent / "docs" / "architecture.md"


def documented_modules() -> dict[str, set[str]]:
    """docs/architecture.md's table: folder -> the modules its row names."""
    rows: dict[str, set[str]] = {}
    for line in ARCHITECTURE_DOC.read_text().splitlines():
        cells = line.split(" | ")
        if len(cells) < 3 or not cells[0].startswith("| `"):
            continue
        folder = cells[0][3:].strip("`").removeprefix("pytest_triton/").rstrip("/")
        rows[folder] = set(re.findall(r"`([a-z_0-9]+)`", cells[1]))
    return rows


def test_the_architecture_page_lists_every_module() -> None:
    documented = documented_modules()
    missing = []
    for module, path in MODULES.items():
        parts = module.split(".")[1:]
        if not parts or path.name == "__init__.py":
            continue
        folder, name = "/".join(parts[:-1]), parts[-1]
        if name != "__main__" and name not in documented.get(folder, set()):
            missing.append(f"{folder}/{name}")
    for source in PACKAGE.rglob("*.c"):  # a C extension's module (setup.py builds it)
        folder = source.parent.relative_to(PACKAGE).as_posix()
        if source.stem not in documented.get(folder, set()):
            missing.append(f"{folder}/{source.stem}")
    assert not missing, f"docs/architecture.md does not list: {sorted(missing)}"
    gone = sorted(
        f"{folder}/{name}"
        for folder, names in documented.items()
        for name in names
        if not any((PACKAGE / folder / f"{name}{suffix}").exists() for suffix in (".py", ".c"))
        and name not in {"static"}
    )
    assert not gone, f"docs/architecture.md lists modules that do not exist: {gone}"


def test_no_module_is_imported_under_an_old_or_other_name() -> None:
    """Modules are imported by their own names (a few short forms aside): an alias that
    keeps an old module name alive hides where the code now is."""
    # short forms, and names that would shadow a local of the importer
    short_forms = {
        "targets": {"tg"},
        "space": {"sp"},
        "baseline": {"gate_baseline", "gb"},
        "document": {"gate_document", "gd"},
        "local": {"local_module"},
        "text_recognition": {"textrec"},
    }
    roots = [PACKAGE, PACKAGE.parent / "tests", PACKAGE.parent / "benchmarks"]
    roots += [PACKAGE.parent / "locustfiles", PACKAGE.parent / "examples"]
    bad = []
    for path in (p for root in roots for p in root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytest_triton"):
                aliases = [(a.name, a.asname) for a in node.names]
            elif isinstance(node, ast.Import):
                aliases = [(a.name.rsplit(".", 1)[-1], a.asname) for a in node.names]
            else:
                continue
            bad += [
                f"{path.name}: {name} as {alias}"
                for name, alias in aliases
                if alias
                and f"{getattr(node, 'module', '')}.{name}".replace(".", "/") + ".py"
                in {str(m.relative_to(PACKAGE.parent)) for m in MODULES.values()}
                and alias not in short_forms.get(name, set())
            ]
    assert not bad, bad


LAYER_PATH = re.compile(
    r"(?<![\w/.-])(?:pytest_triton/)?((?:base|client|parity|accuracy|repository|models|server|session"
    r"|gate|plugin|load|cli)/[\w/]*\w\.py)\b"
)
DOTTED = re.compile(r"\bpytest_triton(?:\.[A-Za-z_]\w*)+")


def test_no_stale_module_path_in_code_or_docs() -> None:
    """Every `pytest_triton.x.y` and `layer/.../module.py` written in code and docs exists
    (the CHANGELOG keeps history; test_public_surface.py imports old paths on purpose)."""
    top = PACKAGE.parent
    files = [*PACKAGE.rglob("*.py"), *(top / "docs").rglob("*.md"), top / "README.md"]
    files += [*(top / "tests").rglob("*.py"), *(top / "benchmarks").rglob("*.py")]
    files += [*(top / "locustfiles").glob("*.py"), *(top / "examples").glob("*.py")]
    loggers = {  # logger names are dotted too
        m.group(1)
        for path in PACKAGE.rglob("*.py")
        for m in re.finditer(r"(?:getLogger\(|LOGGER = )\s*\"([\w.]+)\"", path.read_text())
    }
    stale = []
    for path in files:
        if path.name == "test_public_surface.py" or path == Path(__file__).resolve():
            continue
        text = path.read_text(errors="replace")
        stale += [
            f"{path.relative_to(top)}: {m.group(0)}"
            for m in LAYER_PATH.finditer(text)
            if not (PACKAGE / m.group(1)).exists()
            and not m.group(1).rsplit("/", 1)[-1].startswith("test_")  # tests/ is laid out alike
        ]
        for m in DOTTED.finditer(text):
            if m.group(0) in loggers:
                continue
            parts = m.group(0).split(".")
            if len(parts) == 2 and parts[1] in pytest_triton.__all__:  # a public name
                continue
            depth = max(
                (
                    i
                    for i in range(2, len(parts) + 1)
                    if PACKAGE.joinpath(*parts[1:i]).with_suffix(".py").exists()
                    or (PACKAGE.joinpath(*parts[1:i]) / "__init__.py").exists()
                ),
                default=1,
            )
            if len(parts) - depth > 1 or (depth == 1 and parts[1][0].islower()):
                stale.append(f"{path.relative_to(top)}: {m.group(0)}")
    assert not stale, stale
