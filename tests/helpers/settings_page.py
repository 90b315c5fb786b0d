"""The docs' settings-page hook (docs/hooks/settings_page.py), loaded as the site loads it: it
is a file of the site, not a module of the package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

HOOK = Path(__file__).resolve().parents[2] / "docs" / "hooks" / "settings_page.py"


def settings_page() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_page", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
