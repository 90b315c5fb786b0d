"""Locust users that own sequences: each task is one whole sequence of a stateful model, its
requests sent one after another under one sequence id (START on the first, END on the last),
every answer checked against that sequence's own reference.

N users keep N sequences in flight, interleaved at the server as perf_analyzer's sequence mode
does (`--sequence-length`, `--sequence-length-variation`, `--sequence-id-range`): the class
attributes `sequence_length`, `sequence_length_variation` and `sequence_id_range` say the
same, and --triton-sequence-length, --triton-sequence-length-variation (%) and
--triton-sequence-id-range override them. A user plans `distinct_sequences` sequences once
(inputs and the PyTorch reference, stepped from the initial state) and sends them in turn,
each time under a fresh id. Each request is a Locust request event named after the model, so
throughput, latency percentiles, the server's statistics (the sequence batcher's queue and
batches included) and the verdict are the same as TritonUser's; a wrong answer is a failed
request whose text starts with "wrong answer:" and names the sequence and step.

Answers are checked on the server a locustfile starts itself; against --host only with
--triton-check-every (any value: a stateful answer is checked every time, because one wrong
state spoils every later answer of its sequence).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import locust
from locust import task

import pytest_triton.load.users  # noqa: F401  (gRPC under gevent, our listeners)
from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError, InferenceError, SpecError, WrongAnswer
from pytest_triton.client.sequence_client import SequenceClient
from pytest_triton.client.wire.request import Protocol
from pytest_triton.load.runner.checking import answers_every
from pytest_triton.load.runner.embedded import EmbeddedSequenceModel
from pytest_triton.load.runner.run_state import StateKey, run_state
from pytest_triton.load.runner.sequence_ids import id_source
from pytest_triton.load.runner.user_settings import (
    user_endpoint,
    user_model,
    user_protocol,
)
from pytest_triton.load.runner.user_start import StartingUser
from pytest_triton.parity.sequence_parity import SequenceCheck
from pytest_triton.repository.sequence import SequencePlan, SequenceReference, plan_sequences

log = logging.getLogger("pytest_triton.load")
CHECKS = StateKey[list[SequenceCheck]]("sequence checks")
"""The checks of this run's sequence users, for the summary at its end."""
UNCHECKED_SAID = StateKey[bool]("sequences unchecked said")

__all__ = ["EmbeddedSequenceModel", "SequenceUser"]


def _sequence_settings(
    cls: type[SequenceUser], config: TritonConfig
) -> tuple[int, float, tuple[int, int]]:
    """Length, variation (a fraction) and id range: --triton-sequence-length,
    --triton-sequence-length-variation (%) and --triton-sequence-id-range where given, else
    the class's own."""
    load = config.load
    length = load.sequence_length or cls.sequence_length
    variation = (
        load.sequence_length_variation / 100
        if load.sequence_length_variation is not None
        else cls.sequence_length_variation
    )
    start, end = load.sequence_id_range or cls.sequence_id_range
    return length, variation, (start, end)


class SequenceUser(StartingUser):
    """Sends whole sequences to a stateful model, one request after another.

    `served` is the EmbeddedSequenceModel started when no --host is given (its SequenceSpec
    also makes the inputs and the reference); `model` names a model on --host instead.
    """

    abstract = True
    _user_kind = "sequence"
    _refusals = (ConfigError, SpecError, InferenceError)
    served: ClassVar[EmbeddedSequenceModel | None] = None
    model: str | None = None
    protocol: Protocol | None = None
    sequence_length: int = 8
    sequence_length_variation: float = 0.2
    sequence_id_range: tuple[int, int] = (1, 2**31)
    distinct_sequences: int = 4
    timeout_s: float = 60.0

    def set_up(self, host: str, config: TritonConfig, number: int) -> None:
        cls = type(self)
        if cls.served is None:
            raise ConfigError(
                f"{cls.__name__} has no `served` EmbeddedSequenceModel: its SequenceSpec "
                "makes the sequences and their reference"
            )
        spec = cls.served.spec
        self._model = user_model(cls, config)
        self._protocol = user_protocol(cls, host, config, number)
        self._client = SequenceClient(
            user_endpoint(self._protocol, host, config),
            self._protocol,
            timeout_s=self.timeout_s,
        )
        length, variation, id_range = _sequence_settings(cls, config)
        self._plans: list[SequencePlan] = plan_sequences(
            spec,
            self.distinct_sequences,
            id_range=(0, self.distinct_sequences),  # keys of the plans; ids come later
            length=length,
            variation=variation,
            seed=number,
        )
        self._check: SequenceCheck | None = None
        state = run_state(self.environment)
        if answers_every(config, host):
            self._check = SequenceCheck(
                self._model,
                spec.output_name,
                SequenceReference(spec).expected(self._plans),
                context=f", protocol {self._protocol!r}",
            )
            state.setdefault(CHECKS, list).append(self._check)
        elif UNCHECKED_SAID not in state:  # said once per run
            state[UNCHECKED_SAID] = True
            log.info(
                "pytest-triton: sequence answers are not checked against a server given "
                "with --host (the locustfile's model need not be the one deployed); pass "
                "--triton-check-every N to check every answer"
            )
        self._ids = id_source(id_range, self.environment)
        self._next_plan: Iterator[SequencePlan] = itertools.cycle(self._plans)
        self._request_type = "HTTP" if self._protocol == "http" else "gRPC"
        # `checked`: this answer is compared with its sequence's reference; the END
        # request's context also carries the sequence's length (triton-perf counts both)
        self._context = {
            "batch_size": 1,
            "protocol": self._protocol,
            "checked": self._check is not None,
        }

    @task
    def sequence(self) -> None:
        """One whole sequence under a fresh id; a failed request ends it (the batcher reaps
        its slot after max_sequence_idle_microseconds). A wrong answer does not: the server
        answered, so the sequence goes on to its END and frees its slot at once (a model
        mixing sequences would otherwise fill the batcher with abandoned ones)."""
        plan = next(self._next_plan)
        sequence_id = self._ids.take()
        spec_input = type(self).served.spec.input_name  # type: ignore[union-attr]
        try:
            for step, x in enumerate(plan.inputs):
                started = time.perf_counter()
                error: Exception | None = None
                size = 0
                try:
                    served = self._client.step(
                        self._model,
                        {spec_input: x},
                        sequence_id,
                        start=step == 0,
                        end=step == plan.length - 1,
                        step=step,
                    )
                    size = sum(a.nbytes for a in served.values())
                    if self._check is not None:
                        error = self._check.check(sequence_id, step, served, key=plan.sequence_id)
                except Exception as exc:  # every client/server failure is a failed request
                    error = exc
                last = step == plan.length - 1
                self.environment.events.request.fire(
                    request_type=self._request_type,
                    name=self._model,
                    response_time=(time.perf_counter() - started) * 1e3,
                    response_length=size,
                    exception=error,
                    context=(
                        {**self._context, "sequence_length": plan.length} if last else self._context
                    ),
                )
                if error is not None and not isinstance(error, WrongAnswer):
                    return
        finally:
            self._ids.give_back(sequence_id)

    def on_stop(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def _report_checks(environment: Any, **_: Any) -> None:
    """One line per run: how many sequence answers were checked, and the first wrong."""
    checks = run_state(environment).get(CHECKS)
    if not checks:
        return
    checked = sum(c.checked for c in checks)
    wrong = [m for c in checks for m in c.mismatches.values()]
    log.info(
        "pytest-triton: %d answers of stateful sequences checked, each against its own "
        "sequence's reference; %d sequences answered wrongly",
        checked,
        len(wrong),
    )
    if wrong:
        log.error("pytest-triton: first wrong sequence answer: %s", wrong[0].describe())


locust.events.test_stop.add_listener(_report_checks)
