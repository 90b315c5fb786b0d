"""The CI files users copy stay valid: the workflow and the pre-commit config parse, and every
command they (and tox) call exists: Makefile targets, tox envs, scripts, tools, pytest options
and markers."""

from __future__ import annotations

import configparser
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from pytest_triton.base.config import settings_for
from pytest_triton.plugin.hooks import MARKERS

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"
PRE_COMMIT = REPO / ".pre-commit-config.yaml"
TOOLS = {"pytest", "ruff", "mypy", "locust", "triton-perf", "triton-deploy", "pip", "python"}
PYTEST_OPTIONS = {s.cli for s in settings_for("pytest")}
# The suite's own markers (pyproject.toml); users' sessions get only the plugin's MARKERS.
SUITE_MARKERS = {
    line.split(":")[0]
    for line in tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())[
        "tool"
    ]["pytest"]["ini_options"]["markers"]
}


def workflow() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def makefile_targets() -> set[str]:
    return set(
        re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", (REPO / "Makefile").read_text(), re.MULTILINE)
    )


def makefile_recipe(target: str) -> str:
    """The target's commands ('' for one that only has prerequisites)."""
    text = (REPO / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)*)", text, re.MULTILINE)
    assert match, f"no rule for make {target}"
    return match.group(1).replace("\\\n", " ")


def tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "tox.ini")
    return parser


def tox_envs() -> set[str]:
    config = tox()
    return {"py"} | {s.split(":", 1)[1] for s in config.sections() if s.startswith("testenv:")}


def workflow_commands() -> Iterator[tuple[str, str]]:
    for name, job in workflow()["jobs"].items():
        for step in job["steps"]:
            if "run" in step:
                yield name, step["run"].replace("\\\n", " ")


def tox_commands() -> Iterator[tuple[str, str]]:
    config = tox()
    for section in config.sections():
        for key in ("commands", "commands_pre"):
            text = config.get(section, key, fallback="")
            for line in filter(None, (t.strip() for t in text.splitlines())):
                yield section, line.replace("{toxinidir}/", "")


def words(command: str) -> list[str]:
    return shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "X", command), comments=True)


SEPARATORS = {"&&", "||", ";", "|", "then", "else", "do", "if", "elif"}
OUTPUTS = ("gate-report", "gpu-report", ".gate-baseline", "refs/")


def simple_commands(command: str) -> Iterator[list[str]]:
    """A shell line's simple commands: words up to each separator."""
    current: list[str] = []
    for word in words(command):
        if word in SEPARATORS or word.endswith(";"):
            if word.endswith(";") and word != ";":
                current.append(word[:-1])
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def check_command(where: str, command: str) -> list[str]:
    """What a shell command calls that does not exist here."""
    problems = []
    for tokens in simple_commands(command):
        while len(tokens) > 1 and re.fullmatch(r"[A-Z_]+=\S*", tokens[0]):
            tokens = tokens[1:]  # VAR=value before the program
        program = tokens[0].rsplit("/", 1)[-1]
        if program == "make":
            targets = [t for t in tokens[1:] if "=" not in t and not t.startswith("-")]
            problems += [
                f"{where}: make {t}: no such Makefile target"
                for t in targets
                if t not in makefile_targets() and not t.endswith(".installed")
            ]
        if program == "tox" and "-e" in tokens:
            envs = tokens[tokens.index("-e") + 1].split(",")
            problems += [f"{where}: tox -e {e}: no such env" for e in envs if e not in tox_envs()]
        for i, token in enumerate(tokens):
            if token.startswith((".venv/bin/", "$(BIN)/")):
                if token.rsplit("/", 1)[1] not in TOOLS:
                    problems.append(f"{where}: {token}: not a tool this project installs")
            elif (
                re.fullmatch(r"\.?[\w-]+(/[\w.-]+)+", token)
                and not token.endswith("/")
                and not token.startswith(OUTPUTS)
                and not (REPO / token).exists()
            ):
                problems.append(f"{where}: {token}: no such file in the repository")
            if token.startswith("--triton-") and token.split("=")[0] not in PYTEST_OPTIONS:
                problems.append(f"{where}: {token}: not a pytest-triton option")
            if program == "pytest" and i and tokens[i - 1] == "-m":
                known = set(MARKERS) | SUITE_MARKERS | {"and", "or", "not"}
                unknown = set(re.findall(r"[a-z_]+", token)) - known
                if unknown:
                    problems.append(f"{where}: -m {token!r}: unknown marker(s) {sorted(unknown)}")
    return problems


def test_workflow_parses_and_has_the_jobs_users_copy() -> None:
    wf = workflow()
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads the bare key `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    jobs = wf["jobs"]
    assert set(jobs) == {"lint", "test", "gate", "gpu", "gpu-in-ngc-image"}
    for name, job in jobs.items():
        assert job.get("runs-on") and job.get("steps"), name
        assert job.get("timeout-minutes"), f"{name}: a job without a timeout can hang for hours"
        for need in job.get("needs", []):
            assert need in jobs, f"{name} needs unknown job {need}"
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), f"{name}: {step}"
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w.-]+)*@v\d+", step["uses"]), step
    for name in ("gpu", "gpu-in-ngc-image"):
        job = jobs[name]
        assert "vars.TRITON_GPU_RUNNER" in job["if"], (
            "GPU jobs must not wait for a runner that a fork does not have"
        )
        assert {"self-hosted", "gpu"} <= set(job["runs-on"])
        assert any("--triton-gpu" in c for j, c in workflow_commands() if j == name)
    ngc = jobs["gpu-in-ngc-image"]["container"]
    assert ngc["image"].startswith("nvcr.io/nvidia/tritonserver:") and "--gpus" in ngc["options"]
    assert any(
        "--triton-executable /opt/tritonserver/bin/tritonserver" in c
        for j, c in workflow_commands()
        if j == "gpu-in-ngc-image"
    )
    uploads = [s for s in jobs["gate"]["steps"] if "upload-artifact" in s.get("uses", "")]
    assert uploads and uploads[0]["with"]["path"].startswith("gate-report")


@pytest.mark.parametrize("source", ["workflow", "tox", "Makefile"])
def test_every_command_called_exists(source: str) -> None:
    if source == "workflow":
        commands = list(workflow_commands())
    elif source == "tox":
        commands = list(tox_commands())
    else:
        commands = [(f"make {t}", makefile_recipe(t)) for t in sorted(makefile_targets())]
    assert commands
    problems = [
        p
        for where, command in commands
        for line in command.splitlines()
        for p in check_command(where, line)
    ]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_what_does_not_exist() -> None:
    assert check_command("x", "make gate test-cpu BASELINE=b.json") == []
    assert check_command("x", "apt-get install -y make python3-venv") == []
    assert check_command("x", "make nonsense") == ["x: make nonsense: no such Makefile target"]
    assert check_command("x", "tox -e py,nope") == ["x: tox -e nope: no such env"]
    assert check_command("x", "images/build-nothing") == [
        "x: images/build-nothing: no such file in the repository"
    ]
    assert check_command("x", ".venv/bin/pytest --triton-gpux") == [
        "x: --triton-gpux: not a pytest-triton option"
    ]
    assert check_command("x", 'A=1 $(BIN)/pytest -m "not heavy"') == [
        "x: -m 'not heavy': unknown marker(s) ['heavy']"
    ]


def test_ci_jobs_match_make_targets_and_tox_envs() -> None:
    called = {t for _, c in workflow_commands() for t in re.findall(r"\bmake (\w[\w-]*)", c)}
    assert {"lint", "gate", "install"} <= called
    assert {"py", "container", "gate", "gpu", "lint"} <= tox_envs()
    config = tox()
    assert config.get("testenv", "commands") == 'pytest -m "not container" {posargs}'
    assert 'pytest -m "not container"' in makefile_recipe("test-cpu")
    assert "pytest -m container" in makefile_recipe("test-container")
    assert "pytest -m container" in config.get("testenv:container", "commands")
    assert "pytest examples -v --triton-report" in config.get("testenv:gate", "commands")


def test_pre_commit_runs_the_pinned_linters_as_make_lint_does() -> None:
    config = yaml.safe_load(PRE_COMMIT.read_text())
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert set(hooks) == {"ruff", "ruff-format", "mypy", "commit-subject"}
    assert hooks.pop("commit-subject")["stages"] == ["commit-msg"]
    pyproject = (REPO / "pyproject.toml").read_text()
    dev = re.findall(r"^dev = \[(.*?)\]", pyproject, re.MULTILINE | re.DOTALL)[0]
    pins = (REPO / "constraints.txt").read_text()
    lint = makefile_recipe("lint")
    for hook_id, hook in hooks.items():
        entry = shlex.split(hook["entry"])
        name = hook_id.split("-")[0]  # ruff-format runs ruff
        assert entry[0] == f".venv/bin/{name}" and hook["language"] == "system", hook
        assert name in dev and re.search(rf"^{name}==", pins, re.MULTILINE), name
        assert (Path(sys.executable).parent / name).exists(), f"{name} is not installed"
        assert f"$(BIN)/{' '.join(entry[0].split('/')[-1:] + entry[1:])}" in lint
    assert hooks["mypy"]["pass_filenames"] is False  # packages come from pyproject.toml
    excluded = re.findall(
        r'"([^"]+)"', re.findall(r"extend-exclude = \[(.*?)\]", pyproject, re.DOTALL)[0]
    )
    for hook_id in ("ruff", "ruff-format"):
        assert excluded and all(re.search(hooks[hook_id]["exclude"], p) for p in excluded)


@pytest.mark.parametrize(
    ("message", "accepted"),
    [
        ("Layout: one folder per layer\n\nWhy it moved.\n", True),
        ("x" * 72 + "\n", False),
        ("Subject\nno blank line before the body\n", False),
        ("\n", False),
    ],
)
def test_commit_subjects_stay_short(tmp_path: Path, message: str, accepted: bool) -> None:
    (tmp_path / "MSG").write_text(message)
    done = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "check-commit-message"), str(tmp_path / "MSG")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode == 0) == accepted, done.stderr


# -- one CI story: what the README says CI runs is what ci.yml, .ci/run and the docs say ------
CI_STORY = (
    "CI runs `make lint`, `.ci/run` (the system set-up, then exactly `make test`) and `make gate`"
)


def prose(text: str) -> str:
    """Comment or markdown text as one line: comment marks and line breaks gone."""
    lines = [re.sub(r"^\s*#\s?", "", line) for line in text.splitlines()]
    return re.sub(r"\s+", " ", " ".join(lines))


def makefile_header() -> str:
    lines = (REPO / "Makefile").read_text().splitlines()
    return "\n".join(line for line in lines[: next(i for i, x in enumerate(lines) if x[:1] != "#")])


def workflow_header() -> str:
    return WORKFLOW.read_text().split("\nname:", 1)[0]


@pytest.mark.parametrize(
    "where",
    ["README.md", "docs/getting-started.md", "docs/gate.md", "Makefile", "ci.yml", ".ci/run"],
)
def test_every_file_tells_the_same_ci_story(where: str) -> None:
    text = {
        "Makefile": makefile_header(),
        "ci.yml": workflow_header(),
        ".ci/run": (REPO / ".ci" / "run").read_text(),
    }.get(where) or (REPO / where).read_text()
    assert CI_STORY in prose(text), f"{where} does not say: {CI_STORY}"
    assert "lint, test-cpu, test-container and gate" not in prose(text), "the old CI story"


def test_ci_yml_runs_what_the_story_says() -> None:
    commands = {job: [c for j, c in workflow_commands() if j == job] for job in workflow()["jobs"]}
    assert commands["lint"] == ["make lint"]
    assert len(commands["test"]) == 1 and commands["test"][0].split()[-1] == ".ci/run"
    assert all("make gate" in c for c in commands["gate"] if "make" in c) and any(
        "make gate" in c for c in commands["gate"]
    )
    ci_run = [
        line
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ci_run[-1] == "make test", ".ci/run ends with exactly the README's test command"
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(make gate.*?)```", readme, re.DOTALL)
    assert block and re.search(r"^make test\s", block.group(1), re.MULTILINE)


GATE_BULLET = re.compile(r"`make gate` checks every zoo.*?\(([^()]*report\.md[^()]*)\)", re.DOTALL)


def gate_files() -> set[str]:
    """What `make gate` writes into its report directory, from the code that writes it."""
    from pytest_triton.gate.markdown import PLOTS
    from pytest_triton.gate.output import REPORT_JSON, REPORT_MD
    from pytest_triton.plugin.gate_report import JUNIT_NAME

    load = re.findall(
        r'(?:out|gate_report_dir) / "(load-[\w-]+\.json)"',
        (REPO / "examples" / "test_release_gate_load.py").read_text(),
    )
    assert load, "the gate's load test no longer names its verdict file as the test expects"
    return {REPORT_JSON, REPORT_MD, JUNIT_NAME, *load, *PLOTS.values()}


@pytest.mark.parametrize("where", ["README.md", "docs/getting-started.md"])
def test_the_docs_list_what_make_gate_writes(where: str) -> None:
    found = GATE_BULLET.search((REPO / where).read_text())
    assert found, f"{where}: no list of the gate report's files after `make gate` checks..."
    listed = set(re.findall(r"`([^`]+)`", found.group(1)))
    assert listed == gate_files()
