"""Which definition of a fixture name a test sees, asked of pytest itself: the plugin's one
use of a private part of pytest, kept here (docs/architecture.md, "Private parts of
libraries").

pytest_generate_tests parametrizes a client or model fixture from the roles of the fixtures
it names (its server, the server's repository), which it asks for only when it runs
(`request.getfixturevalue`), so they are not in the test's fixture closure. At collection no
public API says which definition of a name a test would get; `FixtureManager.getfixturedefs`
(the lookup pytest runs for `getfixturevalue`) does, with pytest's own override rules
(plugins, conftests from the root down, the module, the class). Its answer is a list of
`pytest.FixtureDef` (a public type), nearest last. tests/plugin/test_fixture_lookup.py is the
contract: it fails when an upgrade of pytest (pinned in constraints.txt) changes either part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def visible_fixture(node: pytest.Item, name: str) -> Callable[..., Any] | None:
    """The function of the fixture `name` that `node` would get; None where none is
    visible to it."""
    manager = node.session._fixturemanager  # private: see the module's docstring
    found = manager.getfixturedefs(name, node)
    return found[-1].func if found else None
