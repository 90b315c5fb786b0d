"""Types of the C pump (_http_pump.c): the load multiplexer's steady state over plain HTTP."""

from typing import Any

class Pump:
    """One plain HTTP connection's answers read, and next requests sent."""

    request: Any
    def __init__(self, fd: int, slot: Any) -> None: ...
    def arm(self, request: Any) -> None: ...
    def disarm(self) -> None: ...

def turn(
    events: list[tuple[int, int]],
    pumps: dict[int, Pump],
    done: list[tuple[Any, float, bytes | None, bytes | None, Any, int, tuple[int, str] | None]],
) -> list[int]: ...
