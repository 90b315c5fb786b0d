"""Sequence ids handed out to a run's sequence users, as perf_analyzer's --sequence-id-range
does: in turn, never one a sequence in flight holds, and in a distributed run each worker
from its own share of the range. The sources live in the run's RunState: two runs in one
process hand out their ids apart."""

from __future__ import annotations

import threading
from typing import Any

from locust.runners import WorkerRunner

from pytest_triton.base.errors import ConfigError
from pytest_triton.load.runner.run_state import StateKey, run_state

MAX_WORKERS = 64
"""Distributed runs split the id range by worker index: worker i takes every 64th id from the
i-th, so that two workers never hold one id (each process hands out its own ids)."""


class SequenceIds:
    """Sequence ids from a range, in turn, never one that a sequence in flight holds (as
    --sequence-id-range hands them out); `offset` and `stride` take this process's share."""

    def __init__(self, start: int, end: int, offset: int = 0, stride: int = 1) -> None:
        self.ids = range(start + offset, end, stride)
        if not self.ids:
            raise ConfigError(
                f"sequence_id_range {start}:{end} holds no id for this process (share "
                f"{offset} of {stride})"
            )
        self.where = f"sequence_id_range {start}:{end}" + (
            f" (this worker's share: every {stride}th id from {start + offset})"
            if stride > 1
            else ""
        )
        self._next = 0
        self._live: set[int] = set()
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            for _ in range(len(self.ids)):
                candidate = self.ids[self._next]
                self._next = (self._next + 1) % len(self.ids)
                if candidate not in self._live:
                    self._live.add(candidate)
                    return candidate
        raise ConfigError(
            f"every id of {self.where} is in flight: it must hold at least one id per user"
        )

    def give_back(self, sequence_id: int) -> None:
        with self._lock:
            self._live.discard(sequence_id)


SEQUENCE_IDS = StateKey[dict[tuple[int, int], SequenceIds]]("sequence ids")
"""This run's id sources by range: its users never hold one id at once."""


def id_source(id_range: tuple[int, int], environment: Any) -> SequenceIds:
    """This process's ids: all of the range, or a worker's share of it."""
    sources = run_state(environment).setdefault(SEQUENCE_IDS, dict)
    if id_range not in sources:
        runner = environment.runner
        worker = getattr(runner, "worker_index", -1) if isinstance(runner, WorkerRunner) else -1
        if worker >= MAX_WORKERS:
            raise ConfigError(
                f"worker {worker}: sequence users split their ids over at most {MAX_WORKERS} "
                "worker processes"
            )
        offset, stride = (worker, MAX_WORKERS) if worker >= 0 else (0, 1)
        sources[id_range] = SequenceIds(*id_range, offset=offset, stride=stride)
    return sources[id_range]
