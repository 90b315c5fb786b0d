"""Parity per sequence: every answer of a sequence against that sequence's own reference.

A stateful model that mixes sequences (state keyed wrongly, or kept in one module buffer)
answers each sequence alone correctly and fails only when sequences interleave; checking
each answer against its own sequence's reference is what catches it. A failure names the
sequence and the first step where its answers part from the reference, with the usual
difference report (compare.py) of that step.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import WrongAnswer
from pytest_triton.parity.compare import ParityReport, Tolerance, compare_outputs

DETAILED = 5
"""Mismatching sequences described in full; the rest are counted."""


@dataclass(frozen=True)
class StepMismatch:
    """The first step of one sequence whose answer is not its reference's."""

    sequence_id: int
    step: int
    length: int
    report: str

    def describe(self) -> str:
        return (
            f"sequence {self.sequence_id}: step {self.step} of {self.length} differs from the "
            f"module stepped from its initial state\n{self.report}"
        )


@dataclass
class SequenceCheck:
    """Checks answers of many sequences as they come, from any thread; remembers the first
    mismatching step of each sequence. `expected[sequence_id][step]` is that step's output."""

    model: str
    output: str
    expected: Mapping[int, Sequence[Array]]
    tolerance: Tolerance | None = None
    context: str = ""
    checked: int = 0
    mismatches: dict[int, StepMismatch] = field(default_factory=dict)
    worst: ParityReport | None = None  # the answer that came closest to its allowance
    failed: dict[int, ParityReport] = field(default_factory=dict)  # first per sequence
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(
        self, sequence_id: int, step: int, served: Mapping[str, Array], key: int | None = None
    ) -> WrongAnswer | None:
        """None when the answer is right, else the WrongAnswer naming sequence and step;
        `key` picks the reference where sequence ids are reused for the same inputs (under
        load a user sends its planned sequences again under new ids)."""
        reference = self.expected[sequence_id if key is None else key]
        tolerances = {self.output: self.tolerance} if self.tolerance else None
        report = compare_outputs(
            {self.output: reference[step]},
            served,
            fmt="torchscript-script",
            context=f"model {self.model!r}{self.context}, sequence {sequence_id}, step {step}",
            tolerances=tolerances,
        )
        with self._lock:
            self.checked += 1
            if self.worst is None or report.headroom_used > self.worst.headroom_used:
                self.worst = report
            if report.ok:
                return None
            mismatch = StepMismatch(sequence_id, step, len(reference), report.describe())
            first = self.mismatches.get(sequence_id)
            if first is None or step < first.step:
                self.mismatches[sequence_id] = mismatch
                self.failed[sequence_id] = report
        return WrongAnswer(f"wrong answer: {mismatch.describe()}")

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def reports(self) -> tuple[ParityReport, ...]:
        """What a ParityResult keeps of the check: the closest answer and the first wrong
        answer of each wrong sequence (the figures of the gate report's row)."""
        with self._lock:
            closest = (self.worst,) if self.worst is not None else ()
            return closest + tuple(self.failed.values())

    def describe(self) -> str:
        if self.ok:
            return (
                f"sequence parity ok: model {self.model!r}{self.context}: {self.checked} answers "
                f"of {len(self.expected)} sequences, each equal to its own reference"
            )
        bad = sorted(self.mismatches.values(), key=lambda m: (m.step, m.sequence_id))
        lines = [
            f"sequence parity FAILED: model {self.model!r}{self.context}: {len(bad)} of "
            f"{len(self.expected)} sequences answered unlike the module stepped on their own "
            f"inputs ({self.checked} answers checked); first differing step of each:"
        ]
        lines += [m.describe() for m in bad[:DETAILED]]
        if len(bad) > DETAILED:
            rest = ", ".join(f"{m.sequence_id} (step {m.step})" for m in bad[DETAILED:])
            lines.append(f"... and sequences {rest}")
        return "\n".join(lines)

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError(self.describe())
