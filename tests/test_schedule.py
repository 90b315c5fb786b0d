"""The order in which `make test` hands out its test files (tests/helpers/schedule.py)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.suite_cpu import Spent, costs_document
from tests.helpers import schedule
from tests.helpers.schedule import Cost


def test_unknown_first_then_longest_first_a_waiting_group_beside_a_computing_one() -> None:
    """Two workers: the longest computing group on one, the longest waiting one beside it;
    the worker that comes free next takes the kind the other is not running."""
    groups: dict[str, Cost | None] = {
        "short-busy": Cost(10, 10),
        "long-busy": Cost(100, 95),
        "long-wait": Cost(80, 8),
        "short-wait": Cost(20, 2),
        "mid-wait": Cost(50, 5),
        "new": None,
    }
    assert schedule.order(groups) == [
        "new",
        "long-busy",  # t=0, worker 1, to t=100
        "long-wait",  # t=0, worker 2 (beside a computing group), to t=80
        "mid-wait",  # t=80, worker 2 (beside a computing group), to t=130
        "short-busy",  # t=100, worker 1 (beside a waiting group)
        "short-wait",  # t=110: no computing group left
    ]


def test_a_group_costs_its_tests_share_of_each_file() -> None:
    costs = {"a.py": Cost(30, 6), "b.py": Cost(10, 10)}
    groups = {"a.py::1": ["a.py"], "a.py::2": ["a.py", "a.py"], "b": ["b.py"], "c": ["c.py"]}
    got = schedule.group_costs(groups, costs)
    assert got["a.py::1"] == Cost(10, 2) and got["a.py::2"] == Cost(20, 4)
    assert got["b"] == Cost(10, 10) and got["c"] is None


def test_the_costs_the_benchmark_writes_are_the_costs_the_schedule_reads(tmp_path: Path) -> None:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(costs_document({"tests/x.py": Spent(4.5, 12.25, 3)})))
    assert schedule.read_costs(path) == {"tests/x.py": Cost(12.2, 4.5)}
    assert schedule.read_costs(tmp_path / "none.json") == {}
