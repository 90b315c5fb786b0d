"""The order in which `make test` hands out its test files (tests/helpers/schedule.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_a_worker_takes_a_whole_file_and_the_zoo_servers_files_together() -> None:
    assert schedule.group_of("tests/load/test_x.py::test_a[http]") == "tests/load/test_x.py"
    assert schedule.group_of("tests/client/test_shared_memory.py::t") == "zoo-server"
    assert schedule.group_of("tests/models/test_zoo_served.py::t[x]") == "zoo-server"
    assert schedule.group_of("examples/test_gate.py::test_b") == "examples/test_gate.py::test_b"


def test_xdist_hands_out_whole_files(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files of a session with two workers: none runs on both (with pytest 9, xdist's
    own loadgroup sent every test its own way)."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    pytester.makeconftest(
        "from tests.helpers import schedule\n"
        "def pytest_xdist_make_scheduler(config, log):\n"
        "    return schedule.file_scheduling(config, log)\n"
    )
    tests = pytester.mkdir("tests")
    for name in ("test_one", "test_two", "test_three"):
        (tests / f"{name}.py").write_text(
            "import os\n"
            "import pytest\n"
            "@pytest.mark.parametrize('i', range(6))\n"
            "def test_it(i):\n"
            "    print(os.environ['PYTEST_XDIST_WORKER'])\n"
        )
    result = pytester.runpytest_subprocess("-n", "2", "-v", "-p", "no:cacheprovider", "tests")
    result.assert_outcomes(passed=18)
    workers: dict[str, set[str]] = {}
    for line in result.outlines:
        if "PASSED" in line and line.startswith("[gw"):
            worker, test = line.split()[0], line.split()[-1]
            workers.setdefault(test.split("::")[0], set()).add(worker)
    assert len(workers) == 3 and all(len(w) == 1 for w in workers.values()), workers
