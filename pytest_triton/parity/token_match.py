"""Parity of streams: the tokens a decoupled model streamed, in order, against the reference's
greedy generation. A mismatch names the first position where they part and both tokens there
(a stream cut short or running long names the position where one of them ended)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_triton.base.errors import WrongAnswer


@dataclass(frozen=True)
class TokenMismatch:
    """Where a streamed answer first differs from the reference (None: that side had ended)."""

    position: int
    served: int | None
    expected: int | None
    served_length: int
    expected_length: int

    def describe(self, context: str = "") -> str:
        def token(value: int | None) -> str:
            return "nothing (the stream had ended)" if value is None else str(value)

        where = f"{context}: " if context else ""
        return (
            f"{where}streamed tokens differ from PyTorch's greedy generation first at "
            f"position {self.position}: served {token(self.served)}, expected "
            f"{token(self.expected)} ({self.served_length} tokens served, "
            f"{self.expected_length} expected)"
        )


def first_difference(served: Sequence[int], expected: Sequence[int]) -> TokenMismatch | None:
    """The first position where two token sequences differ, or None when they are equal."""
    for position in range(max(len(served), len(expected))):
        mine = served[position] if position < len(served) else None
        theirs = expected[position] if position < len(expected) else None
        if mine != theirs:
            return TokenMismatch(position, mine, theirs, len(served), len(expected))
    return None


def assert_stream_parity(
    served: Sequence[int], expected: Sequence[int], *, context: str = ""
) -> None:
    """Raise AssertionError naming the first differing position and both tokens."""
    mismatch = first_difference(served, expected)
    if mismatch is not None:
        raise AssertionError(mismatch.describe(context))


def wrong_stream(
    served: Sequence[int], expected: Sequence[int], *, context: str = ""
) -> WrongAnswer | None:
    """The WrongAnswer a load generator reports for a wrong stream, or None when right."""
    mismatch = first_difference(served, expected)
    if mismatch is None:
        return None
    return WrongAnswer(f"wrong answer: {mismatch.describe(context)}")
