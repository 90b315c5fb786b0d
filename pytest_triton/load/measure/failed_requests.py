"""Failed requests by reason: what a load report says beside "N failed" so that a run never
fails (or passes) without saying why, as Locust's failures table groups failures by error.

A failed request is one of five kinds: a wrong answer (the answer check's "wrong answer: ..."),
a server error (the server answered with an error: grouped by its text), a timeout, a
connection refused, reset or dropped (the server may have died), or a client-side error (the
request could not be made or sent: grouped by the exception's type). A `FailureTally` counts
each reason and keeps its first example; tallies add up (slices into windows, workers into
the master's). No locust import here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pytest_triton.base.errors import InferenceError, RefusedError, ServerError, WrongAnswer

FailureKind = Literal["wrong answer", "server error", "timeout", "connection", "client error"]
KINDS: tuple[FailureKind, ...] = get_args(FailureKind)
KIND_WORDS: dict[FailureKind, str] = {
    "wrong answer": "wrong answers",
    "server error": "server error",
    "timeout": "timeouts",
    "connection": "connection refused or reset",
    "client error": "client-side error",
}
EXAMPLE_CHARS = 600
"""An example's text is cut here: a report shows the first one of each reason, not a log."""
TEXT_CHARS = 160
"""A server error's text groups its failures up to here (its request-specific tail varies)."""
TOP_REASONS = 3
"""Reasons printed beside a WARNING; the JSON has all of them."""
_REQUEST_ID = re.compile(r"\[request id: [^\]]*\] ")


@dataclass(frozen=True)
class FailureReason:
    """Why one request failed: its kind and, for a server or client-side error, the text
    that groups it (the server's message, the exception's type)."""

    kind: FailureKind
    text: str = ""

    def label(self) -> str:
        words = KIND_WORDS[self.kind]
        return f"{words}: {self.text}" if self.text else words


def failure_reason(error: BaseException) -> FailureReason:
    """The reason of a failed request from what its user reported."""
    message = str(error)
    if isinstance(error, WrongAnswer) or message.startswith("wrong answer"):
        return FailureReason("wrong answer")
    if isinstance(error, InferenceError):
        if error.cause == "server":
            return FailureReason("server error", server_text(error.server_message))
        if error.cause in ("timeout", "connection"):
            return FailureReason(error.cause)
        return FailureReason("client error", error.server_message.split(":", 1)[0])
    if isinstance(error, TimeoutError):
        return FailureReason("timeout")
    if isinstance(error, (ServerError, RefusedError, ConnectionError)):  # the server died too
        return FailureReason("connection")
    return FailureReason("client error", type(error).__name__)


def server_text(message: str) -> str:
    """A server's error text as it groups failures: its first line, without the request id."""
    first = _REQUEST_ID.sub("", message).strip().splitlines()
    text = first[0] if first else "(no text)"
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 3] + "..."


def example_of(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."


def failed(error: BaseException) -> tuple[FailureReason, str]:
    """A failed request's reason and its example, worked out once for every tally it joins."""
    return failure_reason(error), example_of(error)


@dataclass(frozen=True)
class ReasonCount:
    """One reason's failed requests and the first of them, in words."""

    reason: FailureReason
    count: int
    example: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.reason.kind,
            "text": self.reason.text,
            "reason": self.reason.label(),  # in words, for readers of the document alone
            "count": self.count,
            "example": self.example,
        }


@dataclass
class FailureTally:
    """Failed requests counted by reason, each with its first example."""

    counts: dict[FailureReason, int] = field(default_factory=dict)
    examples: dict[FailureReason, str] = field(default_factory=dict)

    def record(self, error: BaseException) -> None:
        self.record_reason(*failed(error))

    def record_reason(self, reason: FailureReason, example: str, count: int = 1) -> None:
        """`count` failed requests of one reason; the first example stays."""
        self.counts[reason] = self.counts.get(reason, 0) + count
        self.examples.setdefault(reason, example)

    def add(self, other: FailureTally) -> None:
        for reason, count in other.counts.items():
            self.record_reason(reason, other.examples.get(reason, ""), count)

    def __bool__(self) -> bool:
        return bool(self.counts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def count(self, kind: FailureKind) -> int:
        return sum(n for r, n in self.counts.items() if r.kind == kind)

    def first(self, kind: FailureKind) -> str | None:
        """The first example of a kind (of its most frequent reason)."""
        found = [rc for rc in self.reasons() if rc.reason.kind == kind]
        return found[0].example if found else None

    def reasons(self) -> list[ReasonCount]:
        """Most frequent first (wrong answers first among equals)."""
        return sorted(
            (ReasonCount(r, n, self.examples.get(r, "")) for r, n in self.counts.items()),
            key=lambda rc: (-rc.count, KINDS.index(rc.reason.kind), rc.reason.text),
        )

    def encode(self) -> list[list[Any]]:
        """JSON- and msgpack-able: [kind, text, count, example] per reason."""
        return [
            [r.kind, r.text, n, self.examples.get(r, "")]
            for r, n in sorted(self.counts.items(), key=lambda rn: (rn[0].kind, rn[0].text))
        ]

    @classmethod
    def decode(cls, data: Iterable[Sequence[Any]]) -> FailureTally:
        tally = cls()
        for kind, text, count, example in data:
            if kind not in KINDS:
                raise ValueError(f"unknown failure kind {kind!r}")
            tally.record_reason(FailureReason(kind, str(text)), str(example), int(count))
        return tally

    def as_list(self) -> list[dict[str, Any]]:
        """The reasons for a JSON report, most frequent first."""
        return [rc.as_dict() for rc in self.reasons()]

    @classmethod
    def from_list(cls, data: Iterable[Mapping[str, Any]]) -> FailureTally:
        """From as_list() (a report read back)."""
        return cls.decode(
            [d["kind"], d.get("text", ""), d["count"], d.get("example", "")] for d in data
        )

    def summary(self, top: int = TOP_REASONS) -> str:
        """The top reasons in one line: '3884 wrong answers; 5 server error: ...'."""
        listed = self.reasons()
        parts = [f"{rc.count:,} {rc.reason.label()}" for rc in listed[:top]]
        more = len(listed) - top
        return "; ".join(parts) + (f"; {more} more reason(s)" if more > 0 else "")

    def table(self) -> str:
        """Locust's failures table, by reason: count, reason, first example."""
        lines = ["| # failed | reason | first example |", "|---:|---|---|"]
        for rc in self.reasons():
            example = rc.example.replace("|", "\\|")
            lines.append(
                f"| {rc.count:,} | {rc.reason.label().replace('|', chr(92) + '|')} | "
                f"{' '.join(example.split())} |"
            )
        return "\n".join(lines)


def tally_of(data: Iterable[Mapping[str, Any]] | None) -> FailureTally:
    """A report's `failure_reasons` (None or absent: none)."""
    return FailureTally.from_list(data or [])
