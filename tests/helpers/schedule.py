"""How `make test` hands its tests to the xdist workers: whole files, in a measured order.

Each test file goes to one worker, so that its module-scoped servers start once, and the
files that share the session's zoo server (ZOO_SERVER_FILES) go to one worker together, which
exports the zoo and starts its server once. xdist's `--dist loadgroup` was meant to do this
from `xdist_group` marks, but with pytest 9 its way of grouping (a suffix written into each
item's private `_nodeid`) no longer reaches the node ids, and every test went its own way:
51 of 68 files ran on both workers, each starting the file's servers. `file_scheduling`
groups by the node id itself (`group_of`).

Two workers on two cores finish soonest when, at every moment, the CPU is busy: the suite's
load tests mostly wait (timed Locust runs, a server asked to time out), others compute
(exports, parity, conformance suites). xdist's default order (the groups with the most tests
first) ran the waiting files side by side, and the machine was 20-45% idle for minutes. Here
the groups are ordered from the costs the CPU log measured (`tests/helpers/suite_costs.json`,
written by `benchmarks/suite_cpu.py --write-costs`): longest first, so that the last files
are short, and a computing group (more CPU a wall second than the median group) beside a
waiting one, so that one worker's wait is the other's CPU. A group the table does not know
(a new file) goes first: its cost shows in the next measurement. `make test` passes
`--no-loadscope-reorder` so that xdist keeps this order. What a group's CPU misses (a
container's processes, the session's zoo server's stubs) only blurs the kinds: the order
stays valid, just less well packed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COSTS = Path(__file__).with_name("suite_costs.json")
# Files whose tests share the session's zoo server (tests/conftest.py): one worker runs them.
ZOO_SERVER_FILES = (
    "tests/accuracy/test_click_logs.py",
    "tests/client/test_shared_memory.py",
    "tests/load/test_batching_gates.py",
    "tests/models/test_zoo_accuracy.py",
    "tests/models/test_zoo_served.py",
)


@dataclass(frozen=True)
class Cost:
    wall_s: float
    cpu_s: float


def read_costs(path: Path = COSTS) -> dict[str, Cost]:
    """Each test file's measured cost (by its path from the repository root); empty without
    the table."""
    if not path.is_file():
        return {}
    files = json.loads(path.read_text())["files"]
    return {name: Cost(float(c["wall_s"]), float(c["cpu_s"])) for name, c in files.items()}


def group_costs(
    groups: Mapping[str, Sequence[str]], costs: Mapping[str, Cost]
) -> dict[str, Cost | None]:
    """A group's cost from the file of each of its tests: each test a share of its file's
    (a file's tests can fall in several groups); None where a file is unknown."""
    tests_of = Counter(f for files in groups.values() for f in files)
    known: dict[str, Cost | None] = {}
    for group, files in groups.items():
        if all(f in costs for f in files):
            known[group] = Cost(
                sum(costs[f].wall_s / tests_of[f] for f in files),
                sum(costs[f].cpu_s / tests_of[f] for f in files),
            )
        else:
            known[group] = None
    return known


def order(groups: Mapping[str, Cost | None], workers: int = 2) -> list[str]:
    """Unknown groups first; then the measured ones as `workers` workers would take them:
    each worker that comes free takes the longest group left of the kind that complements
    what the others run now (a waiting group beside a computing one, and the reverse),
    so the order is longest first with the kinds side by side."""
    unknown = [g for g, c in groups.items() if c is None]
    left = {g: c for g, c in groups.items() if c is not None}
    rates = sorted(c.cpu_s / c.wall_s for c in left.values() if c.wall_s > 0)
    median = rates[len(rates) // 2] if rates else 0.0

    def computing(cost: Cost) -> bool:
        return cost.wall_s > 0 and cost.cpu_s / cost.wall_s > median

    running: list[tuple[float, Cost | None]] = [(0.0, None)] * workers  # (ends at, what)
    taken: list[str] = []
    while left:
        running.sort(key=lambda r: r[0])
        now, _ = running.pop(0)
        others = [cost for _, cost in running if cost is not None]
        busy_beside = sum(computing(c) for c in others) * 2 >= len(others) > 0
        wanted = [g for g, c in left.items() if computing(c) != busy_beside] or list(left)
        group = max(wanted, key=lambda g: left[g].wall_s)
        cost = left.pop(group)
        taken.append(group)
        running.append((now + cost.wall_s, cost))
    return unknown + taken


def group_of(nodeid: str) -> str:
    """The unit a worker takes whole: a test's file under tests/ (the zoo server's files
    together), any other test (the examples') on its own."""
    path = nodeid.split("::")[0]
    if path in ZOO_SERVER_FILES:
        return "zoo-server"
    return path if path.startswith("tests/") else nodeid


def file_scheduling(config: Any, log: Any) -> Any:
    """xdist's scope scheduling with group_of as the scope: the workers take whole groups,
    in the order the collection has them (tests/conftest.py sorts it by `order`)."""
    from xdist.scheduler import LoadScopeScheduling  # xdist only where it schedules

    class FileScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return FileScheduling(config, log)
