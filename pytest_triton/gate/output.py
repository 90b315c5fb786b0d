"""Writing a decided gate document: report.json, report.md, the plots, GitHub's job summary,
and a baseline."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_triton.gate.document import json_safe
from pytest_triton.gate.markdown import render
from pytest_triton.gate.plots import write_plots

REPORT_JSON = "report.json"
REPORT_MD = "report.md"


def dump(document: Mapping[str, Any]) -> str:
    return json.dumps(json_safe(document), indent=2, allow_nan=False) + "\n"


def write_report(
    document: dict[str, Any],
    directory: Path,
    *,
    headroom_limit_pct: float | None = None,
    step_summary: str | None = None,
) -> list[Path]:
    """Write the report into the directory (made if missing); the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    plots, why_not = write_plots(document, directory, headroom_limit_pct)
    document["plots"] = plots
    if why_not:
        document.setdefault("notes", []).append(why_not)
    (directory / REPORT_JSON).write_text(dump(document))
    markdown = render(document, plots=plots)
    if why_not:
        markdown += f"\nNote: {why_not}\n"
    (directory / REPORT_MD).write_text(markdown)
    if step_summary:  # GitHub Actions: $GITHUB_STEP_SUMMARY (images cannot be linked there)
        with open(step_summary, "a") as summary:
            summary.write(render(document, images=False) + "\n")
    return [directory / REPORT_JSON, directory / REPORT_MD, *(directory / p for p in plots)]


def save_baseline(document: Mapping[str, Any], path: Path) -> None:
    """A baseline is a gate report: compare later runs with --triton-baseline PATH."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump(document))
