"""Where the suite's CPU went: tables from a PYTEST_TRITON_CPU_LOG file.

    PYTEST_TRITON_CPU_LOG=cpu.jsonl make test
    python benchmarks/suite_cpu.py cpu.jsonl [--top 20] [--write-costs COSTS_JSON]

Prints the machine's busy and idle CPU over the run, the CPU and wall seconds each test file
spent (files by CPU), and the tests that spent the most. How each test's CPU is counted:
tests/helpers/cpu_log.py. --write-costs stores each file's wall and CPU seconds for the order
in which `make test` hands out its files (tests/helpers/schedule.py).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Spent:
    cpu_s: float = 0.0
    wall_s: float = 0.0
    tests: int = 0

    def add(self, record: dict[str, Any]) -> None:
        self.cpu_s += float(record["cpu_s"])
        self.wall_s += float(record["wall_s"])
        self.tests += 1


def read(path: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The tests' lines and the controller's (by event: start, finish)."""
    tests, machine = [], {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "event" in record:
            machine[record["event"]] = record
        else:
            tests.append(record)
    return tests, machine


def by_file(tests: list[dict[str, Any]]) -> dict[str, Spent]:
    files: dict[str, Spent] = defaultdict(Spent)
    for record in tests:
        files[record["test"].split("::")[0]].add(record)
    return dict(files)


def machine_lines(machine: dict[str, dict[str, Any]], tests_cpu_s: float) -> list[str]:
    if not {"start", "finish"} <= set(machine):
        return ["(no machine totals: the run did not finish)"]
    start, finish = machine["start"], machine["finish"]
    busy = finish["busy_s"] - start["busy_s"]
    idle = finish["idle_s"] - start["idle_s"]
    wall = finish["time"] - start["time"]
    return [
        f"wall {wall:.0f} s; machine busy {busy:.0f} core-s, idle {idle:.0f} core-s "
        f"({100 * idle / (busy + idle):.0f}% idle)",
        f"counted in tests: {tests_cpu_s:.0f} core-s ({100 * tests_cpu_s / busy:.0f}% of busy; "
        "the rest: containers, servers no test reaped, the kernel, the controller)",
    ]


def table(rows: list[tuple[str, Spent]]) -> list[str]:
    lines = ["| CPU (core-s) | wall (s) | tests | file |", "|---|---|---|---|"]
    lines += [f"| {s.cpu_s:.1f} | {s.wall_s:.1f} | {s.tests} | `{name}` |" for name, s in rows]
    return lines


def costs_document(files: dict[str, Spent]) -> dict[str, Any]:
    return {
        "how": "PYTEST_TRITON_CPU_LOG=FILE make test; python benchmarks/suite_cpu.py FILE "
        "--write-costs tests/helpers/suite_costs.json (2-core machine, 2 workers)",
        "files": {
            name: {"wall_s": round(s.wall_s, 1), "cpu_s": round(s.cpu_s, 1)}
            for name, s in sorted(files.items())
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=20, help="how many files and tests to list")
    parser.add_argument(
        "--write-costs", type=Path, metavar="JSON", help="store each file's wall and CPU seconds"
    )
    args = parser.parse_args()
    tests, machine = read(args.log)
    if args.write_costs:
        document = costs_document(by_file(tests))
        args.write_costs.write_text(json.dumps(document, indent=1) + "\n")
    total = sum(float(r["cpu_s"]) for r in tests)
    print("\n".join(machine_lines(machine, total)))
    files = sorted(by_file(tests).items(), key=lambda item: -item[1].cpu_s)
    print(f"\n{len(tests)} tests in {len(files)} files; the files that spent the most:")
    print("\n".join(table(files[: args.top])))
    print("\nthe tests that spent the most:")
    print("| CPU (core-s) | wall (s) | test |\n|---|---|---|")
    for r in sorted(tests, key=lambda r: -float(r["cpu_s"]))[: args.top]:
        print(f"| {r['cpu_s']:.1f} | {r['wall_s']:.1f} | `{r['test']}` |")


if __name__ == "__main__":
    main()
