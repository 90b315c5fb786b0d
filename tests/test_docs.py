"""The documentation: the mkdocs site builds with --strict (no broken link, no page outside the
nav), its settings page is generated from the one settings table, and README.md stays short
and points into the site."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.settings_page import settings_page

ROOT = Path(__file__).resolve().parent.parent


SETTINGS = settings_page().SETTINGS


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.fail(
            "mkdocs and mkdocs-material are not installed: "
            "pip install -c constraints.txt -e '.[docs]'"
        )
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_site_builds_strict(site: Path) -> None:
    for page in (
        "index.html",
        "getting-started/index.html",
        "gpu/index.html",
        "architecture/index.html",
        "reference/settings/index.html",
        "reference/api/index.html",
    ):
        assert (site / page).is_file(), page
    assert (site / "images" / "webui-triton-tab.png").is_file()


def test_settings_page_lists_every_setting(site: Path) -> None:
    page = html.unescape((site / "reference" / "settings" / "index.html").read_text())
    assert "settings-table" not in page, "the hook left its marker in the page"
    text = re.sub(r"<[^>]+>", "", page)
    for setting in SETTINGS:
        if setting.internal:
            assert setting.cli not in text, f"internal setting {setting.name} is documented"
            continue
        assert setting.cli in text, setting.name
        if setting.fronts & {"locust", "perf"}:
            assert setting.env in text, setting.name
        if "pytest" in setting.fronts:
            assert setting.ini in text, setting.name
        if "perf" in setting.fronts:
            for alias in setting.aliases:
                assert alias in text, (setting.name, alias)


def test_api_reference_documents_every_public_name(site: Path) -> None:
    import pytest_triton

    source = (ROOT / "docs" / "reference" / "api.md").read_text()
    page = (site / "reference" / "api" / "index.html").read_text()
    for name in pytest_triton.__all__:
        assert f"::: pytest_triton.{name}\n" in source, f"docs/reference/api.md lacks {name}"
        assert f'id="pytest_triton.{name}"' in page, f"the API page rendered no {name}"


def test_readme_is_short_and_links_to_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 100
    links = set(re.findall(r"\]\((docs/[^)#\s]+)", readme))
    assert "docs/index.md" in links and "docs/reference/settings.md" in links
    for link in links:
        assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"
    for command in ("make gate", "make test"):
        assert command in readme


def test_readme_shows_your_own_model_and_what_is_served_first() -> None:
    from pytest_triton.base.formats import FORMATS
    from tests.helpers.doc_blocks import blocks_of

    readme = (ROOT / "README.md").read_text()
    first = blocks_of(ROOT / "README.md")[0]
    assert first.line <= 40 and first.file_name == "conftest.py", first.where
    served = ", ".join(FORMATS[:-1]) + f" and {FORMATS[-1]}, over http and grpc"
    assert served in " ".join(readme.split()), f"the README must say what is served: {served}"
    assert "formats=[" in readme


def test_parity_page_lists_every_tolerance_with_its_reason() -> None:
    """A pip user reads the tolerances and why they are so on the parity page, not in
    parity/compare.py: each row of its tables is there, with the same numbers."""
    from pytest_triton.parity.compare import DEFAULT_TOLERANCES, TOLERANCES

    rows = []
    for line in (ROOT / "docs" / "parity.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[4][:1].isdigit():
            formats = {f.strip() for f in cells[0].split(",")}
            rows.append((formats, cells[1], cells[2], cells[3], float(cells[4]), float(cells[5])))
    assert rows, "docs/parity.md has no tolerance table"
    for (fmt, dtype, device, numerics), tol in TOLERANCES.items():
        found = [
            r
            for r in rows
            if fmt in r[0]
            and r[1] == dtype
            and r[2] in (device, "any")
            and r[3] in (numerics, "any")
        ]
        assert [(r[4], r[5]) for r in found] == [(tol.rtol, tol.atol)], (fmt, dtype, device)
    for dtype, tol in DEFAULT_TOLERANCES.items():
        found = [r for r in rows if r[0] == {"any"} and r[1] == dtype]
        assert [(r[4], r[5]) for r in found] == [(tol.rtol, tol.atol)], dtype


# Pages that explain or list rather than show how: the benchmarks page keeps its run record
# (machine and date per table), the architecture and development pages are for contributors.
NOT_HOW_TO = {"performance.md", "architecture.md", "development.md"}


def test_how_to_pages_open_with_an_example_and_hold_no_run_log() -> None:
    """A how-to page shows what to run within its first 25 lines, and carries no issue or
    stop numbers nor load averages (run records belong on the benchmarks page)."""
    run_log = re.compile(r"load average|[Ss]top [0-9]+|[Ii]ssue [0-9]+")
    problems = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        lines = page.read_text().splitlines()
        if page.name not in NOT_HOW_TO:
            problems += [
                f"{page.name}:{n}: {line.strip()}"
                for n, line in enumerate(lines, 1)
                if run_log.search(line)
            ]
            if page.name != "index.md" and not any(line.startswith("```") for line in lines[:25]):
                problems.append(f"{page.name}: no example in its first 25 lines")
    assert not problems, problems
