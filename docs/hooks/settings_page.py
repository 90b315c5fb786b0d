"""mkdocs hook: the settings reference page, generated from the package's one settings table.

`docs/reference/settings.md` holds the marker below; at build time it is replaced by one row
per setting, so the page can never drift from the code. Registered under `hooks:` in
mkdocs.yml.
"""

from __future__ import annotations

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

MARKER = "<!-- settings-table -->"
PAGE = "reference/settings.md"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    # Python-Markdown's tables split no cell on a pipe inside a code span (a backslash there
    # would show).
    return f"`{text}`" if text else ""


def _hint(setting: Any) -> str:
    """What follows the flag: nothing for a switch, the choices, or the value's name."""
    if setting.flag:
        return ""
    if setting.choices:
        return " " + "|".join(setting.choices)
    return " " + (setting.metavar or "X")


def _row(setting: Any) -> str:
    fronts = setting.fronts
    hint = _hint(setting)
    pytest_option = _code(setting.cli + hint) if "pytest" in fronts else ""
    ini = _code(setting.ini) if "pytest" in fronts else ""
    # Locust's parser, triton-perf and triton-tune read TRITON_* variables; pytest reads ini files instead.
    env = _code(setting.env) if fronts & {"locust", "perf", "tune"} else ""
    locust = _code(setting.cli + hint) if "locust" in fronts else ""
    perf = (_code(" / ".join([setting.cli, *setting.aliases]) + hint)
            if fronts & {"perf", "tune"} else "")
    if perf and "perf" not in fronts:
        perf += " (triton-tune only)"
    meaning = setting.help + (f" ({setting.unit})" if setting.unit else "")
    cells = [f"**{setting.name}**", pytest_option, ini, env, locust, perf,
             _cell(setting.default_text), _cell(meaning)]
    return "| " + " | ".join(cells) + " |"


def render_settings() -> str:
    """The markdown that replaces the marker: the table, then the settings triton-deploy takes."""
    rows = [s for s in SETTINGS if not s.internal]
    header = ("| setting | pytest option | ini | environment | Locust flag "
              "| triton-perf / triton-tune flag | default | meaning |\n"
              "|---|---|---|---|---|---|---|---|")
    table = "\n".join([header, *(_row(s) for s in rows)])
    deploy = [s for s in rows if "deploy" in s.fronts]
    if deploy:
        table += ("\n\n`triton-deploy` also takes "
                  + ", ".join(_code(s.cli + _hint(s)) for s in deploy) + ".")
    return table


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        # A warning, so `mkdocs build --strict` fails instead of publishing an empty page.
        logging.getLogger("mkdocs.hooks.settings_page").warning(
            "%s lacks the marker %s", PAGE, MARKER)
        return markdown
    return markdown.replace(MARKER, render_settings())
