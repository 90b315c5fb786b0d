"""pytest-triton's state on a Locust Environment: one typed object under one attribute, as
pytest's stash is on the pytest side, instead of an attribute per module by string name.

Each module that keeps something for a run declares its slot once,
`WINDOW_LOG = StateKey[WindowLog]("window log")`, and reads it back typed:
`run_state(environment).get(WINDOW_LOG)`. What a module once kept in a module-level registry
(users' numbers, sequence ids, answer checks, the multiplexer) lives here too, so two
Environments in one process (a test's, a library user's) share nothing. Nothing here
imports the modules that keep state, so any of them can use it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

ATTRIBUTE = "pytest_triton"
"""The Environment's one attribute of ours."""


class StateKey(Generic[T]):
    """A typed slot of RunState; its name is for repr and errors only."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


class RunState:
    """What this process keeps for one Locust Environment, by slot."""

    def __init__(self) -> None:
        self._values: dict[StateKey[Any], Any] = {}

    def get(self, key: StateKey[T]) -> T | None:
        found: T | None = self._values.get(key)
        return found

    def setdefault(self, key: StateKey[T], make: Callable[[], T]) -> T:
        """The slot's value, made by `make` on first use (a registry of this run)."""
        if key not in self._values:
            self._values[key] = make()
        found: T = self._values[key]
        return found

    def __setitem__(self, key: StateKey[T], value: T) -> None:
        self._values[key] = value

    def pop(self, key: StateKey[T]) -> T | None:
        """Forget a slot (a run that starts over); what it held, or None."""
        found: T | None = self._values.pop(key, None)
        return found

    def __contains__(self, key: StateKey[Any]) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return f"RunState({', '.join(sorted(k.name for k in self._values))})"


def run_state(environment: Any) -> RunState:
    """The Environment's state, made on first use."""
    state = getattr(environment, ATTRIBUTE, None)
    if not isinstance(state, RunState):
        state = RunState()
        setattr(environment, ATTRIBUTE, state)
    return state
