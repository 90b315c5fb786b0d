"""Traffic shapes as Locust's LoadTestShape, chosen by --triton-shape (no shape class in the
locustfile needed): the master (or the single process) sets `environment.shape_class` at
Locust's init event, before Locust decides how to start the load, so any locustfile that
imports pytest-triton's users gets them.

A closed-loop shape sets the user count of each moment (steps, a linear ramp, a spike); an
open-loop one (with --triton-request-rate, and a replayed trace) keeps -u users and moves the
request rate they share, which every process (workers too) reads from the same stages
(load/measure/stages.py), counted from its own test start.
"""

from __future__ import annotations

import time
from typing import Any

from locust import LoadTestShape
from locust.env import Environment

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.load.measure.stages import (
    Arrival,
    Stage,
    load_at,
    open_loop_shape,
    read_trace,
    stages_of,
)
from pytest_triton.load.runner.run_state import StateKey, run_state

SPAWN_RATE = 100.0
"""Users started (or stopped) per second when a stage changes the count."""
SHAPE_CLOCK = StateKey[float]("shape clock start")
TRACE = StateKey[list["Arrival"]]("arrival trace")


class TritonShape(LoadTestShape):
    """The stages of --triton-shape; the run ends after the last one (or at -t)."""

    def __init__(self, stages: list[Stage], open_loop_users: int | None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.stages = stages
        self.open_loop_users = open_loop_users
        self.started_at = time.time()

    def reset_time(self) -> None:
        super().reset_time()  # type: ignore[no-untyped-call]
        self.started_at = time.time()  # wall clock, as the request log keys requests

    def tick(self) -> tuple[int, float] | None:
        load = load_at(self.stages, self.get_run_time())  # type: ignore[no-untyped-call]
        if load is None:
            return None
        if self.open_loop_users is not None:
            return self.open_loop_users, SPAWN_RATE
        return max(1, round(load)), SPAWN_RATE


def trace_of(environment: Environment, config: TritonConfig) -> list[Arrival] | None:
    """The replayed trace (read once per process), or None."""
    if config.load.shape != "replay":
        return None
    trace = run_state(environment).get(TRACE)
    if trace is None:
        trace = read_trace(config.load.replay or "")
        run_state(environment)[TRACE] = trace
    return trace


def install_shape(environment: Environment, config: TritonConfig) -> TritonShape | None:
    """Make the shape the run follows (the master's, or the single process's)."""
    if config.load.shape == "none":
        return None
    options = environment.parsed_options
    distributed = options is not None and (
        getattr(options, "master", False) or getattr(options, "processes", None)
    )
    if config.load.shape == "replay" and distributed:
        raise ConfigError(
            "--triton-shape replay runs in one Locust process (its users share the trace's "
            "arrivals): leave out --processes / --master"
        )
    stages = stages_of(config, trace_of(environment, config))
    users = None
    if open_loop_shape(config):
        users = max(1, int(getattr(options, "num_users", None) or 1))
    shape = TritonShape(stages, users)
    shape.runner = environment.runner
    environment.shape_class = shape
    if environment.available_shape_classes is not None:
        environment.available_shape_classes[type(shape).__name__] = shape
    return shape


def shape_of(environment: Environment) -> TritonShape | None:
    shape = environment.shape_class
    return shape if isinstance(shape, TritonShape) else None


def attach_shape_clock(environment: Environment) -> None:
    """Every process notes when its test started: an open-loop shape's rate, and a replayed
    trace's arrivals, count from there."""
    run_state(environment)[SHAPE_CLOCK] = time.perf_counter()

    def started(**_: Any) -> None:
        run_state(environment)[SHAPE_CLOCK] = time.perf_counter()

    environment.events.test_start.add_listener(started)


def shape_clock(environment: Environment) -> float:
    """perf_counter() of this process's test start."""
    return run_state(environment).get(SHAPE_CLOCK) or time.perf_counter()
