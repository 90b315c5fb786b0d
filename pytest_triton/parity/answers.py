"""Answers checked as they come back under load, against the PyTorch reference of each request.

Every answer is checked for its outputs' names, datatypes and shapes; a sample of them (every
N-th) also for its values, with the parity tolerances (compare.py). The shape check costs
about nothing on an answer like one seen correct before: an answer is known by its length and
its header (the JSON header of an HTTP answer, the gRPC message before its tensor bytes; see
wire.request.answer_header), and one whose header was checked is not decoded again. A sampled
answer equal byte for byte to one already compared and found right is right too (where the
answer carries its outputs, not over shared memory). Only a new header, or a sampled answer
not seen before, is decoded.

A reduced-precision variant (INT8, fp16) is judged by agreement instead: a compared answer's
samples are scored by an `agreement` scorer (top-1 agreement with the fp32 reference, from
the accuracy layer) and counted (`agreed` of `judged`), so that its rounding is not a wrong
answer and the run's agreement rate is judged against a target; the shape check stays.

A check returns None, or the WrongAnswer a load generator reports as a failed request. The
first wrong answers of each output name where they differ (max abs diff, worst index, served
vs native); later ones of the same output only say that they do, so that a model that
answers wrongly ten thousand times leaves a short list of distinct failures.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import WrongAnswer
from pytest_triton.client.wire.request import (
    PreparedRequest,
    RawAnswer,
    answer_header,
    read_answer,
)
from pytest_triton.parity.compare import Tolerance, compare_outputs, signature_problem

DETAILED = 5
"""Wrong answers per output (and kind) whose message names the difference."""
KNOWN_HEADERS = 8
"""Correct headers remembered per request (over shared memory each has its own)."""
VERIFIED_ANSWERS = 4
"""Answers remembered per request whose values were compared and right: a sampled answer
byte for byte equal to one of them is right without decoding (a deterministic model answers
the same inputs with the same bytes; one that does not is compared every time)."""
Outputs = Mapping[str, Array]
WrongSoFar = collections.Counter[tuple[str, str]]
"""Wrong answers so far by model and kind (an output's name and what was wrong with it)."""
Agreement = Callable[[Outputs, Outputs], Array]
"""(served outputs, reference outputs) -> one score per sample, 1.0 where they agree."""


@dataclass
class Expected:
    """A request and the outputs PyTorch gives for it: one reference, or several by label
    (e.g. two model versions, any of which is a right answer)."""

    request: PreparedRequest
    references: dict[str, Outputs]
    name: str = ""  # which request, in a wrong answer's words: "request 2 of 4, 1 row(s)"
    known: list[tuple[int, bytes]] = field(default_factory=list)  # (length, header) checked
    verified: list[tuple[bytes, str]] = field(default_factory=list)  # (answer, label) compared


@dataclass(frozen=True)
class Verdict:
    """What one checked answer was: None for `wrong` when right; `matched` is the label of
    the reference its values matched (None when its values were not compared)."""

    wrong: WrongAnswer | None
    matched: str | None = None
    compared: bool = False


RIGHT = Verdict(None)


class AnswerCheck:
    """Checks one user's answers: `expected` pairs its prepared requests with their reference
    outputs; values are compared on every `every`-th answer (0: never, shapes only), with
    the parity tolerances, or with `agreement` where given (counted, never a wrong answer).
    `wrong_so_far` is shared by the checks whose messages count together (a load run's
    users: the first DETAILED wrong answers of the run name the difference); by default
    this check's own."""

    def __init__(
        self,
        model: str,
        expected: Sequence[tuple[PreparedRequest, Mapping[str, Outputs]]],
        *,
        every: int,
        fmt: str = "",
        device: str = "cpu",
        tolerances: Mapping[str, Tolerance] | None = None,
        offset: int = 0,
        context: str = "",
        wrong_so_far: WrongSoFar | None = None,
        agreement: Agreement | None = None,
    ) -> None:
        self.model = model
        self.agreement = agreement
        self.context = context or f"model {model!r}"
        self.every = every
        self.fmt = fmt
        self.device = device
        self.tolerances = tolerances
        self.wrong_so_far = WrongSoFar() if wrong_so_far is None else wrong_so_far
        self._by_request = {
            request: Expected(
                request,
                dict(references),
                f"the user's request {i + 1} of {len(expected)}, "
                f"{_rows(next(iter(references.values())))} row(s)",
            )
            for i, (request, references) in enumerate(expected)
        }
        # Users of one process start their counts apart, so their samples do not all fall
        # on the same turn of the multiplexer.
        self._count = offset % every if every else 0
        self.allowed: tuple[str, ...] | None = None  # labels a right answer may match; None: any
        self.checked = 0
        self.compared = 0  # answers judged against the reference: values compared, or wrong
        self.agreed = 0.0  # samples of compared answers that agree (with `agreement`)
        self.judged = 0  # samples of compared answers scored (with `agreement`)

    def check(self, request: PreparedRequest, raw: RawAnswer) -> Verdict:
        """Check one answer to `request` (as it came back, not decoded)."""
        expected = self._by_request.get(request)
        if expected is None:
            return RIGHT  # a request this check was not told about
        self.checked += 1
        sample = False
        if self.every:
            self._count += 1
            if self._count >= self.every:
                self._count = 0
                sample = True
        body = raw if isinstance(raw, bytes) else raw.body
        if not sample:
            size = len(body)
            for length, header in expected.known:
                if length == size and body.startswith(header):
                    return RIGHT
        elif expected.request.memory is None:  # the answer carries its outputs' bytes
            for answer, label in expected.verified:
                if body == answer and (self.allowed is None or label in self.allowed):
                    self.compared += 1
                    if self.agreement is not None:  # remembered only where every sample agreed
                        rows = _rows(expected.references[label])
                        self.agreed += rows
                        self.judged += rows
                    return Verdict(None, label, True)
        verdict = self._decoded(expected, raw, sample)
        if (
            verdict.matched is not None
            and expected.request.memory is None
            and len(expected.verified) < VERIFIED_ANSWERS
        ):
            expected.verified.append((bytes(body), verdict.matched))
        return verdict

    def _decoded(self, expected: Expected, raw: RawAnswer, sample: bool) -> Verdict:
        try:
            served = read_answer(expected.request, raw)
        except Exception as exc:  # an answer tritonclient cannot read is a wrong one
            self.compared += 1
            return Verdict(self._wrong("unreadable", f"cannot be read: {exc}", None, expected))
        reference = next(iter(expected.references.values()))
        served = _as_reference_shapes(served, reference)
        for name, native in reference.items():
            problem = signature_problem(native, served.get(name))
            if problem is not None:
                self.compared += 1
                return Verdict(
                    self._wrong(f"{name}:shape", f"output {name!r}: {problem}", None, expected)
                )
        if len(expected.known) < KNOWN_HEADERS:
            size = len(raw) if isinstance(raw, bytes) else len(raw.body)
            entry = (size, answer_header(raw))
            if entry not in expected.known:
                expected.known.append(entry)
        if not sample:
            return RIGHT
        self.compared += 1
        return self._values(expected, served)

    def _values(self, expected: Expected, served: Outputs) -> Verdict:
        labels = [
            label for label in expected.references if self.allowed is None or label in self.allowed
        ]
        if self.agreement is not None:
            return self._agreement(expected, served, labels)
        reports = []
        for label in labels:
            report = compare_outputs(
                expected.references[label],
                served,
                fmt=self.fmt,
                tolerances=self.tolerances,
                device=self.device,
            )
            if report.ok:
                return Verdict(None, label, True)
            reports.append((label, report))
        if not reports:
            return Verdict(
                self._wrong("no-reference", "no reference is allowed now", None, expected),
                None,
                True,
            )
        # The closest reference names the difference.
        label, report = min(reports, key=lambda lr: lr[1].headroom_used)
        bad = [d for d in report.diffs if not d.ok]
        key = ",".join(d.name for d in bad) + ":values"
        against = f" (against reference {label})" if len(expected.references) > 1 else ""
        detail = "; ".join(d.describe() for d in bad) + against
        brief = "; ".join(f"output {d.name!r} outside the parity tolerance" for d in bad)
        return Verdict(self._wrong(key, detail, brief, expected), None, True)

    def _agreement(self, expected: Expected, served: Outputs, labels: Sequence[str]) -> Verdict:
        """Count the samples that agree with the closest allowed reference; the answer is
        `matched` (remembered as verified) only when all of them do."""
        if not labels:
            return Verdict(
                self._wrong("no-reference", "no reference is allowed now", None, expected),
                None,
                True,
            )
        assert self.agreement is not None
        scored = [
            (np.asarray(self.agreement(served, expected.references[label])), label)
            for label in labels
        ]
        scores, label = max(scored, key=lambda sl: float(sl[0].sum()))
        self.agreed += float(scores.sum())
        self.judged += int(scores.size)
        return Verdict(None, label if bool(np.all(scores == 1.0)) else None, True)

    def _wrong(
        self, key: str, detail: str, brief: str | None = None, expected: Expected | None = None
    ) -> WrongAnswer:
        seen = self.wrong_so_far[self.model, key]
        self.wrong_so_far[self.model, key] = seen + 1
        text = detail
        if seen >= DETAILED and brief is not None:
            text = f"{brief} (the first {DETAILED} such answers name the differences)"
        which = f" ({expected.name})" if expected is not None and expected.name else ""
        return WrongAnswer(f"wrong answer: {self.context}: {text}{which}")


def _rows(outputs: Outputs) -> int:
    """Samples of one answer: its outputs' first dimension."""
    return int(next(iter(outputs.values())).shape[0])


def _as_reference_shapes(served: dict[str, Array], reference: Outputs) -> dict[str, Array]:
    """Per-row scalars travel as [batch, 1] (Triton's dims [1]); PyTorch returns [batch]."""
    for name, native in reference.items():
        array = served.get(name)
        if (
            array is not None
            and native.ndim == 1
            and array.ndim == 2
            and array.shape == (native.shape[0], 1)
        ):
            served[name] = array.reshape(native.shape)
    return served
