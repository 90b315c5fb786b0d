"""What a pytest session the tests ran said, cut to what a failure needs: its tail ends in
the slowest-durations table (pyproject's --durations), which pushed the failure's own text
out of a plain tail, so the FAILURES and ERRORS sections come first."""

from __future__ import annotations

import re

SECTION = re.compile(r"^=+ (FAILURES|ERRORS) =+$", re.MULTILINE)
END = re.compile(r"^=+ (warnings summary|slowest \d+ durations|short test summary info) =+$", re.M)


def failure_text(stdout: str, tail: int = 3000, section: int = 6000) -> str:
    """The session's FAILURES/ERRORS sections (each cut to `section` characters) and then
    its last `tail` characters; the tail alone when nothing failed."""
    parts = []
    for found in SECTION.finditer(stdout):
        end = END.search(stdout, found.end())
        body = stdout[found.start() : end.start() if end else len(stdout)]
        parts.append(body[:section])
    parts.append(stdout[-tail:])
    return "\n...\n".join(parts)
