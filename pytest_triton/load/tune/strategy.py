"""How triton-tune chooses and ranks candidates: objectives, constraints, the quick search
(coordinate steps from the committed configuration, as model_analyzer's quick search climbs
from its start), the exhaustive one, and the Pareto front of throughput against p99.

Plain code over a `measure(candidate) -> Trial` callback: tested without a server. No locust
import here.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_triton.base.errors import ConfigError
from pytest_triton.load.tune.space import DIMENSIONS, Candidate, SearchSpace

Objective = Literal["throughput", "p99", "goodput"]
OBJECTIVES: tuple[Objective, ...] = ("throughput", "p99", "goodput")
Status = Literal["measured", "disqualified", "failed"]


@dataclass(frozen=True)
class Constraints:
    """model_analyzer's constraints: p99 at most (ms), throughput at least (samples/s),
    the server's resident memory at most (MB, where it can be read)."""

    max_p99_ms: float | None = None
    min_throughput: float | None = None
    max_memory_mb: float | None = None

    def describe(self) -> str:
        parts = []
        if self.max_p99_ms is not None:
            parts.append(f"p99 <= {self.max_p99_ms:g} ms")
        if self.min_throughput is not None:
            parts.append(f"throughput >= {self.min_throughput:g}/s")
        if self.max_memory_mb is not None:
            parts.append(f"memory <= {self.max_memory_mb:g} MB")
        return ", ".join(parts) or "none"


@dataclass
class Trial:
    """One candidate tried: deployed, parity-checked and (unless disqualified) measured."""

    index: int
    candidate: Candidate
    status: Status
    model_name: str = ""
    throughput: float = math.nan  # samples/s
    p99_ms: float = math.nan
    avg_ms: float = math.nan
    within_slo: float = math.nan  # share of requests within the SLO (goodput runs)
    memory_mb: float | None = None
    stable: bool = True
    message: str = ""  # the parity mismatch, the accuracy shortfall or the error
    # with an accuracy rule: the served metric / fp32 PyTorch's on the rule's dataset, and
    # the figures it came from ("top1 0.9694 vs 0.9694, N=360")
    accuracy_ratio: float = math.nan
    accuracy: str = ""
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    committed: bool = False
    point: dict[str, Any] = field(default_factory=dict, repr=False)
    # figures (throughput, p99, avg) of the search's measurement and of each re-measurement
    # (--confirm); the figures above are then their medians
    measurements: list[tuple[float, float, float]] = field(default_factory=list)
    # how far apart its throughput figures were, relative to their median: over the
    # measurement's windows, and over its re-measurements (NaN: not known)
    spread: float = math.nan
    # failed requests under load (the whole measurement, warm-up included) and their
    # reasons ([{kind, text, count, example}]): beyond --perf-fail-ratio, disqualified
    failed_requests: int = 0
    failure_reasons: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def goodput(self) -> float:
        """Samples per second answered within the SLO."""
        return self.throughput * self.within_slo

    @property
    def feasible(self) -> bool:
        return self.status == "measured" and not self.violations

    def value(self, objective: Objective) -> float:
        return {"throughput": self.throughput, "p99": self.p99_ms, "goodput": self.goodput}[
            objective
        ]

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["candidate"] = self.candidate.as_dict()
        data["goodput"] = self.goodput
        data["feasible"] = self.feasible
        return data


def remeasured(trial: Trial, again: Trial, constraints: Constraints) -> None:
    """Fold another measurement of the same candidate into a trial: its figures become the
    medians of all its measurements."""
    if again.status == "disqualified":  # failed requests this time: it is no candidate
        trial.status, trial.message = again.status, again.message
        trial.failed_requests, trial.failure_reasons = again.failed_requests, again.failure_reasons
        return
    if again.status != "measured":
        return
    if not trial.measurements:
        trial.measurements.append((trial.throughput, trial.p99_ms, trial.avg_ms))
    trial.measurements.append((again.throughput, again.p99_ms, again.avg_ms))
    trial.throughput, trial.p99_ms, trial.avg_ms = (
        statistics.median(m[i] for m in trial.measurements) for i in range(3)
    )
    trial.stable = trial.stable and again.stable
    trial.spread = max(
        (
            x
            for x in (trial.spread, again.spread, relative_spread(m[0] for m in trial.measurements))
            if not math.isnan(x)
        ),
        default=math.nan,
    )
    trial.violations = check_constraints(trial, constraints) + [
        v for v in trial.violations if "requests failed" in v
    ]


def relative_spread(values: Iterable[float]) -> float:
    """(max - min) / median of the figures (NaN with fewer than two): how far apart two
    measurements of the same candidate may come out on this machine."""
    known = [v for v in values if not math.isnan(v)]
    if len(known) < 2:
        return math.nan
    middle = statistics.median(known)
    return (max(known) - min(known)) / middle if middle > 0 else math.nan


def windows_spread(windows: Sequence[dict[str, Any]]) -> float:
    """The spread of a measurement's windows' throughputs."""
    return relative_spread(float(w.get("throughput", math.nan)) for w in windows)


def check_constraints(trial: Trial, constraints: Constraints) -> list[str]:
    """What a measured trial breaks, each as 'p99 12.3 ms > 10 ms'."""
    broken = []
    c = constraints
    if c.max_p99_ms is not None and not trial.p99_ms <= c.max_p99_ms:
        broken.append(f"p99 {trial.p99_ms:.2f} ms > {c.max_p99_ms:g} ms")
    if c.min_throughput is not None and not trial.throughput >= c.min_throughput:
        broken.append(f"throughput {trial.throughput:,.1f}/s < {c.min_throughput:g}/s")
    memory = trial.memory_mb
    if c.max_memory_mb is not None and memory is not None and memory > c.max_memory_mb:
        broken.append(f"memory {trial.memory_mb:,.0f} MB > {c.max_memory_mb:g} MB")
    return broken


def _excess(trial: Trial, constraints: Constraints) -> float:
    """How far an infeasible trial is from its constraints (relative; 0 when none broken)."""
    c = constraints
    total = 0.0
    if c.max_p99_ms is not None and trial.p99_ms > c.max_p99_ms:
        total += trial.p99_ms / c.max_p99_ms - 1
    if c.min_throughput is not None and trial.throughput < c.min_throughput:
        total += 1 - trial.throughput / c.min_throughput
    if c.max_memory_mb is not None and trial.memory_mb and trial.memory_mb > c.max_memory_mb:
        total += trial.memory_mb / c.max_memory_mb - 1
    return total


def rank_key(trial: Trial, objective: Objective, constraints: Constraints) -> tuple[float, ...]:
    """Larger is better: feasible before infeasible (the nearer its constraints, the
    better), measured before disqualified; then the objective."""
    if trial.status != "measured":
        return (-2.0, 0.0, -math.inf)
    value = trial.value(objective)
    if math.isnan(value):
        value = -math.inf if objective != "p99" else math.inf
    score = -value if objective == "p99" else value
    if trial.violations:
        return (-1.0, -_excess(trial, constraints), score)
    return (0.0, 0.0, score)


def best_trial(
    trials: Sequence[Trial], objective: Objective, constraints: Constraints
) -> Trial | None:
    """The best feasible trial, or None when none is."""
    feasible = [t for t in trials if t.feasible]
    return max(feasible, key=lambda t: rank_key(t, objective, constraints), default=None)


def committed_trial(
    trials: Sequence[Trial], objective: Objective, constraints: Constraints
) -> Trial | None:
    """The committed configuration's best-ranked trial (its best concurrency), feasible or
    not; None when it was not tried."""
    mine = [t for t in trials if t.committed]
    return max(mine, key=lambda t: rank_key(t, objective, constraints), default=None)


def pareto_front(trials: Sequence[Trial]) -> list[Trial]:
    """Measured trials no other beats on both throughput (higher) and p99 (lower)."""
    measured = [t for t in trials if t.status == "measured" and not math.isnan(t.throughput)]
    front = [
        t
        for t in measured
        if not any(
            o.throughput >= t.throughput
            and o.p99_ms <= t.p99_ms
            and (o.throughput > t.throughput or o.p99_ms < t.p99_ms)
            for o in measured
        )
    ]
    return sorted(front, key=lambda t: t.throughput)


# -- the searches ---------------------------------------------------------------------------------
Measure = Callable[[Candidate], Trial]
BATCH_GROWTH = 1.1  # the server's mean batch grew by a tenth: batching still gains


@dataclass
class Budget:
    """--time-budget: a candidate starts only when the mean time of those before it still
    fits in what is left."""

    seconds: float | None
    started: float = field(default_factory=time.monotonic)
    spent: list[float] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def mean(self) -> float:
        return sum(self.spent) / len(self.spent) if self.spent else 0.0

    def allows_another(self) -> bool:
        if self.seconds is None or not self.spent:
            return True
        return self.elapsed + self.mean <= self.seconds

    def eta(self, remaining: int) -> float:
        left = self.mean * remaining
        if self.seconds is not None:
            left = min(left, max(0.0, self.seconds - self.elapsed))
        return left


@dataclass
class Search:
    """One search over a space from the committed configuration: `run` yields every trial;
    `stopped` says why it ended early (the time budget), if it did."""

    space: SearchSpace
    start: Candidate
    request_batch: int
    objective: Objective
    constraints: Constraints
    budget: Budget
    mode: Literal["quick", "exhaustive"] = "quick"
    trials: dict[Candidate, Trial] = field(default_factory=dict)
    stopped: str = ""
    remaining: int = 0  # what the progress line's ETA counts: left in the list, or this pass
    remeasures: int = 1  # a loss within the spread is measured again at most this often
    remeasured: int = 0  # how many times that happened

    def __post_init__(self) -> None:
        problem = self.start.problem(self.request_batch)
        if problem:
            raise ConfigError(f"the committed configuration cannot serve the requests: {problem}")
        self.space = self.space.including(self.start)

    def run(self, measure: Measure) -> Iterator[Trial]:
        if self.mode == "exhaustive":
            yield from self._exhaustive(measure)
        else:
            yield from self._quick(measure)

    def _try(self, candidate: Candidate, measure: Measure) -> Trial | None:
        """The trial of a candidate (measured once); None when the budget is spent."""
        if candidate in self.trials:
            return self.trials[candidate]
        if self.trials and not self.budget.allows_another():
            self.stopped = (
                f"time budget of {self.budget.seconds:g} s reached after "
                f"{len(self.trials)} candidates"
            )
            return None
        began = time.monotonic()
        trial = measure(candidate)
        self.budget.spent.append(time.monotonic() - began)
        self.trials[candidate] = trial
        return trial

    def _exhaustive(self, measure: Measure) -> Iterator[Trial]:
        everything = [self.start, *(c for c in self.space.every(self.request_batch))]
        todo = list(dict.fromkeys(everything))
        for number, candidate in enumerate(todo):
            self.remaining = len(todo) - number - 1
            trial = self._try(candidate, measure)
            if trial is None:
                return
            yield trial

    def _better(self, a: Trial, b: Trial) -> bool:
        return rank_key(a, self.objective, self.constraints) > rank_key(
            b, self.objective, self.constraints
        )

    def _within_noise(self, a: Trial, b: Trial) -> bool:
        """Whether a's loss to b is smaller than the spread either showed (both measured,
        on the same side of the constraints)."""
        key_a = rank_key(a, self.objective, self.constraints)
        key_b = rank_key(b, self.objective, self.constraints)
        if a.status != "measured" or key_a[:2] != key_b[:2]:
            return False
        va, vb = a.value(self.objective), b.value(self.objective)
        larger = max(abs(va), abs(vb))
        spread = max((x for x in (a.spread, b.spread) if not math.isnan(x)), default=math.nan)
        if math.isnan(spread) or not larger:
            return False
        return abs(va - vb) / larger < spread

    def _settles_better(self, trial: Trial, current: Trial, measure: Measure) -> bool:
        """Whether the step beats the current best: a loss within the measurements' spread
        is measured again, both of them, before the direction is given up (one noisy
        window series must not end the climb)."""
        for _ in range(self.remeasures):
            if self._better(trial, current) or not self._within_noise(trial, current):
                break
            if not self.budget.allows_another():
                break
            for again in (trial, current):
                remeasured(again, measure(again.candidate), self.constraints)
            self.remeasured += 1
        return self._better(trial, current)

    @staticmethod
    def _batching_gains(trial: Trial, current: Trial) -> bool:
        """The server formed larger batches with the larger max_batch_size: raising it
        further may still pay, though this step did not beat the best (yet)."""
        grown = float(trial.point.get("server_avg_batch") or 0.0)
        before = float(current.point.get("server_avg_batch") or 0.0)
        return trial.status == "measured" and grown > BATCH_GROWTH * max(before, 1.0)

    def _visit(
        self, candidate: Candidate, measure: Measure
    ) -> Generator[Trial, None, Trial | None]:
        """The candidate's trial, yielded when it was measured just now (not when tried
        before); None when the budget is spent."""
        fresh = candidate not in self.trials
        trial = self._try(candidate, measure)
        if trial is not None and fresh:
            yield trial
        return trial

    def _under_more_load(self, trial: Trial, measure: Measure) -> Generator[Trial, None, Trial]:
        """A configuration's best trial at the current concurrency or above: raising the
        concurrency while this configuration gains from it. Batching gains only when
        requests wait together, so a configuration judged at the load the unbatched one
        preferred would lose a race it was never given the load to win (the climb would
        stop at batching off, concurrency 2). Not for a latency objective, nor for a
        configuration over its p99 or memory limit: more load lowers neither."""
        if self.objective == "p99" or trial.status != "measured":
            return trial
        if not all(v.startswith("throughput") for v in trial.violations):
            return trial
        values = self.space.values("concurrency")
        above = [v for v in values if v > trial.candidate.concurrency]
        best = trial
        for concurrency in above:
            candidate = dataclasses.replace(best.candidate, concurrency=concurrency)
            if candidate.problem(self.request_batch):
                continue
            more = yield from self._visit(candidate, measure)
            if more is None:
                break
            if not self._settles_better(more, best, measure):
                break
            best = more
        return best

    def _quick(self, measure: Measure) -> Iterator[Trial]:
        """Coordinate search: along each dimension in turn, step from the current best to
        the neighbouring value, up first then down, and keep stepping while it improves
        (a step in the server's configuration judged at its best concurrency from the
        current one up); passes repeat until one changes nothing (or the budget is
        spent)."""
        self.remaining = 2 * len(DIMENSIONS)
        current = self._try(self.start, measure)
        if current is None:
            return
        yield current
        improved = True
        while improved:
            improved = False
            for position, dimension in enumerate(DIMENSIONS):
                values = self.space.values(dimension)
                value = getattr(current.candidate, dimension)
                if len(values) < 2 or value not in values:
                    continue  # nothing to try, or it means nothing here (no batching)
                here = values.index(value)
                for step in (1, -1):
                    moved = False
                    index = here + step
                    while 0 <= index < len(values):
                        candidate = self.space.completed(
                            dataclasses.replace(current.candidate, **{dimension: values[index]})
                        ).normalized()
                        index += step
                        if candidate == current.candidate:
                            break  # this dimension means nothing here (no batching)
                        if candidate.problem(self.request_batch):
                            continue
                        self.remaining = 2 * (len(DIMENSIONS) - position)
                        trial = yield from self._visit(candidate, measure)
                        if trial is None:
                            return
                        if dimension != "concurrency" and not self._better(trial, current):
                            trial = yield from self._under_more_load(trial, measure)
                        if not self._settles_better(trial, current, measure):
                            raising = dimension == "max_batch_size" and step == 1
                            if raising and self._batching_gains(trial, current):
                                continue  # batches still grow: look one size further
                            break
                        current, moved, improved = trial, True, True
                    if moved:
                        break
        self.remaining = 0
