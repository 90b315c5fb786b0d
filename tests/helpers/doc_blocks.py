"""The ```python blocks of README.md and docs/**/*.md, read the way tests/docs/test_snippets.py
runs them.

The rules the pages are written to:
- a block runs unless the line right before its fence is `<!-- docs-test: skip (REASON) -->`;
- a block whose first line is `# file: NAME` is a file of a per-page project, not a script;
  consecutive such blocks (no plain python block between them) form one project; a file name
  the project already has starts the next one.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPEN = re.compile(r"^(?P<indent>\s*)```python\s*$")
SKIP = re.compile(r"^\s*<!-- docs-test: skip \((?P<reason>.+)\) -->\s*$")
FILE = re.compile(r"^# file: (?P<name>[\w./-]+)\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    number: int  # 1-based, among the page's python blocks
    line: int  # the opening fence's line, 1-based
    code: str
    skip: str | None  # the reason, when the page marks the block skipped

    @property
    def file_name(self) -> str | None:
        first = self.code.split("\n", 1)[0]
        found = FILE.match(first)
        return found["name"] if found else None

    @property
    def id(self) -> str:
        return f"{self.page}#{self.number}:L{self.line}"

    @property
    def where(self) -> str:
        return f"{self.page}, python block {self.number} at line {self.line}"


@dataclass(frozen=True)
class Project:
    """Consecutive `# file:` blocks of one page: written into one directory and run together."""

    blocks: tuple[Block, ...]

    @property
    def files(self) -> dict[str, str]:
        return {b.file_name: b.code for b in self.blocks if b.file_name}

    @property
    def skip(self) -> str | None:
        return next((b.skip for b in self.blocks if b.skip), None)

    @property
    def where(self) -> str:
        lines = ", ".join(str(b.line) for b in self.blocks)
        return f"{self.blocks[0].page}, the project of the python blocks at lines {lines}"


def blocks_of(path: Path, root: Path = ROOT) -> list[Block]:
    """Every ```python block of one page, in order."""
    lines = path.read_text().splitlines()
    page = path.relative_to(root).as_posix()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opened = OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        indent = opened["indent"]
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}: the python block at line {i + 1} is never closed")
        skipped = SKIP.match(lines[i - 1]) if i else None
        body = [
            line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end]
        ]
        found.append(
            Block(
                page=page,
                number=len(found) + 1,
                line=i + 1,
                code=textwrap.dedent("\n".join(body)) + "\n",
                skip=skipped["reason"] if skipped else None,
            )
        )
        i = end + 1
    return found


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def projects_of(blocks: list[Block]) -> list[Project]:
    """The page's `# file:` blocks grouped: a plain block between two, or a file name the
    project already has (a second conftest.py), ends the first project."""
    grouped: list[list[Block]] = []
    previous_was_file = False
    for block in blocks:
        if block.file_name is None:
            previous_was_file = False
            continue
        if previous_was_file and block.file_name not in {b.file_name for b in grouped[-1]}:
            grouped[-1].append(block)
        else:
            grouped.append([block])
        previous_was_file = True
    return [Project(tuple(group)) for group in grouped]
