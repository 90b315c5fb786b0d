"""The settings reference page, generated from the package's one settings table.

`python docs/hooks/settings_page.py --write` writes docs/reference/settings.md (committed, so
the table reads on the repository page as on the site); `--check` exits 1 when the committed
page is stale, and tests/docs/test_settings_reference.py fails then. As the mkdocs hook
(registered under `hooks:` in mkdocs.yml) it serves the page as generated now, and warns,
which fails `mkdocs build --strict`, when the committed file differs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

# Document the checkout this file belongs to, not whatever copy of the package is installed.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The one place the settings table is imported from.
from pytest_triton.base.config import SETTINGS  # noqa: E402

PAGE = "reference/settings.md"
PATH = ROOT / "docs" / PAGE
COMMAND = "python docs/hooks/settings_page.py --write"

INTRO = f"""<!-- Generated from the settings table (pytest_triton/base/config.py) by `{COMMAND}`:
edit the table, then run it; a test fails while this file is stale. -->

# Settings reference

Every setting of pytest-triton, for the pytest plugin, Locust, `triton-perf` and `triton-tune`,
is declared once, in the package's settings table: its parser, help and the front ends it
applies to. Every front end parses a setting the same way and fails with the same message.

- **pytest**: each setting is a command-line option and an ini key (`[pytest]` /
  `[tool.pytest.ini_options]`); precedence is factory argument > command line > ini > default.
  `pytest --help` lists them.
- **Locust**: a locustfile takes the `--triton-*` flags and the targets, each also read from
  its environment variable and shown in the web UI's form. `locust -f LOCUSTFILE --help`
  lists them (the package installs a one-line `pytest_triton_locust.pth` that adds them to
  Locust's help, which Locust prints before it imports the locustfile).
- **triton-perf / triton-tune**: the same flags, plus perf_analyzer-style aliases; command
  line over `TRITON_*` environment variables over defaults. `triton-perf --help` lists them.

**Durations** carry their unit in the *meaning* column: a bare number is in that unit (ms or
s), or give the unit yourself: `--triton-measurement-interval 4s` is
`--triton-measurement-interval 4000`, `--perf-latency-p99 0.05s` is `--perf-latency-p99 50`
(`us`, `ms`, `s`, `m` and `h` are understood, in flags, environment variables and ini keys).

An empty cell means the setting does not apply to that front end. The targets (`--perf-*`) are
named as model_analyzer's constraints; see [targets and verdict](../load.md#targets-and-verdict).
"""


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """A code span in a table cell. No pipe in it: GitHub's tables split a cell on one even
    inside a code span unless it is escaped, and Python-Markdown's would show the escape."""
    assert "|" not in text, text
    return f"`{text}`" if text else ""


def _hint(setting: Any) -> str:
    """What follows the flag: nothing for a switch, the choices (as argparse's --help writes
    them), or the value's name (`http/grpc/both` where --help says `http|grpc|both`)."""
    if setting.flag:
        return ""
    if setting.choices:
        return " {" + ",".join(setting.choices) + "}"
    return " " + (setting.metavar or "X").replace("|", "/")


def _row(setting: Any) -> str:
    fronts = setting.fronts
    hint = _hint(setting)
    pytest_option = _code(setting.cli + hint) if "pytest" in fronts else ""
    ini = _code(setting.ini) if "pytest" in fronts else ""
    # Locust's parser, triton-perf and triton-tune read TRITON_* variables; pytest reads ini
    # files instead.
    env = _code(setting.env) if fronts & {"locust", "perf", "tune"} else ""
    locust = _code(setting.cli + hint) if "locust" in fronts else ""
    perf = (
        _code(" / ".join([setting.cli, *setting.aliases]) + hint)
        if fronts & {"perf", "tune"}
        else ""
    )
    if perf and "perf" not in fronts:
        perf += " (triton-tune only)"
    cells = [
        f"**{setting.name}**",
        pytest_option,
        ini,
        env,
        locust,
        perf,
        _cell(setting.default_text),
        _cell(setting.meaning),
    ]
    return "| " + " | ".join(cells) + " |"


def render_settings() -> str:
    """The table, then the settings triton-deploy takes."""
    rows = [s for s in SETTINGS if not s.internal]
    header = (
        "| setting | pytest option | ini | environment | Locust flag "
        "| triton-perf / triton-tune flag | default | meaning |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    table = "\n".join([header, *(_row(s) for s in rows)])
    deploy = [s for s in rows if "deploy" in s.fronts]
    if deploy:
        table += (
            "\n\n`triton-deploy` also takes "
            + ", ".join(_code(s.cli + _hint(s)) for s in deploy)
            + "."
        )
    return table


def render_page() -> str:
    return f"{INTRO}\n{render_settings()}\n"


def stale() -> bool:
    return not PATH.is_file() or PATH.read_text(encoding="utf-8") != render_page()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs: the page as generated now; a warning (strict builds fail) when the committed
    file is not that."""
    if page.file.src_uri != PAGE:
        return markdown
    if markdown != render_page():
        logging.getLogger("mkdocs.hooks.settings_page").warning(
            "docs/%s is stale (the settings table changed): run %s", PAGE, COMMAND
        )
    return render_page()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"write docs/{PAGE}")
    mode.add_argument("--check", action="store_true", help="exit 1 when it is stale")
    args = parser.parse_args(argv)
    if args.write:
        PATH.write_text(render_page(), encoding="utf-8")
        print(f"wrote docs/{PAGE} ({len(SETTINGS)} settings)")
        return 0
    if stale():
        print(f"docs/{PAGE} is stale: run {COMMAND}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
