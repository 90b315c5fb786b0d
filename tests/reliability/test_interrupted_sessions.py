"""pytest sessions of a tiny project using the plugin, interrupted by SIGINT (Ctrl-C) and SIGKILL
at random points, 20 times: no tritonserver or python stub outlives its session, and nothing
else is left either, except what a SIGKILL leaves on disk (work directory, repository,
/dev/shm region), which the next session that starts a server removes.

The points are drawn from a seed printed at the start (and in every failure):
PYTEST_TRITON_INTERRUPT_SEED=<seed> replays a run, PYTEST_TRITON_INTERRUPT_RUNS=<n> makes
more of them. Sessions run in two lanes at once, each with its own TMPDIR.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import warm_start
from tests.helpers.leftovers import left_by, wait_for_no_processes

pytestmark = [pytest.mark.reliability, pytest.mark.triton]
REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("PYTEST_TRITON_INTERRUPT_RUNS", "20"))
LANES = 2
EXIT_TIMEOUT_S = 90.0  # a session told to stop must be gone by then
SERVER_EXIT_S = 30.0  # a server outliving a killed session stops by PDEATHSIG within this
REAPED = "[tiny] the server is up"  # printed after the reaping points of a session

CONFTEST = """
import torch
from pytest_triton import ModelSpec, factories


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


triton_repository = factories.repository([ModelSpec(
    name="affine", module=Affine, example_inputs=(torch.randn(4, 4),), inputs=["x"],
    outputs=["y"], max_batch_size=8, formats=["torchscript-trace"])])
"""
# The session serves a numpy python model beside the spec's (a python stub like any hosted
# model's, without the seconds a stub takes to import torch: 20 sessions stay short).
TEST = '''
import numpy as np

MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]) for r in requests]
"""
CONFIG = """name: "add_one"
backend: "python"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]
"""


def test_served(triton_server):
    model = triton_server.repository.root / "add_one"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(MODEL)
    (model / "config.pbtxt").write_text(CONFIG)
    print("@REAPED@", flush=True)
    client = triton_server.client("http")
    client.load_model("add_one")
    out = client.infer("add_one", {"X": np.zeros((1, 4), np.float32)})
    assert (out["Y"] == 1).all()
'''.replace("@REAPED@", REAPED)


@dataclass
class Session:
    """One pytest run of the tiny project, maybe interrupted."""

    project: Path
    tmpdir: Path
    signal: signal.Signals | None = None
    delay_s: float = 0.0
    pid: int = 0
    code: int | None = None
    wall_s: float = 0.0
    output: str = ""
    signalled: bool = False

    def run(self) -> Session:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
        env.update(TMPDIR=str(self.tmpdir), PYTHONPATH=str(REPO_ROOT))
        started = time.monotonic()
        log = self.tmpdir.parent / f"session-{time.monotonic_ns()}.log"
        with open(log, "w+") as out:
            proc = warm_start.popen(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    "-q",
                    "-s",
                    "--triton-protocol=http",
                    "--full-trace",  # where an interrupt landed, if a session leaves something
                ],
                cwd=self.project,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.pid = proc.pid
            if self.signal is not None:
                try:
                    proc.wait(self.delay_s)
                except subprocess.TimeoutExpired:
                    proc.send_signal(self.signal)
                    self.signalled = True
            try:
                self.code = proc.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            self.wall_s = time.monotonic() - started
            out.seek(0)
            self.output = out.read()
        log.unlink()
        return self

    def interrupted_in(self) -> str:
        """The plugin's frames of the session's traceback (--full-trace), and its last lines."""
        ours = [line for line in self.output.splitlines() if "pytest_triton/" in line]
        return "\n".join(["its traceback in pytest_triton:", *ours[-15:], self.output[-600:]])

    def describe(self) -> str:
        how = f"{self.signal.name} at {self.delay_s:.1f}s" if self.signalled else "not interrupted"
        return f"pid {self.pid} ({how}, exit {self.code}, {self.wall_s:.1f}s)"


@dataclass
class Lane:
    """Sessions one after another in one TMPDIR; checks each as it ends."""

    project: Path
    tmpdir: Path
    plan: list[tuple[signal.Signals, float]]  # signal, and when: a share of a whole session
    whole_s: float  # how long a whole session takes here: the shortest seen so far
    done: list[Session] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unreaped: dict[int, Session] = field(default_factory=dict)  # killed, files still on disk
    reaped: int = 0  # leftovers of killed sessions seen removed by the next session

    def check(self, session: Session) -> None:
        name = session.describe()
        if session.code is None:
            self.problems.append(f"{name}: did not end within {EXIT_TIMEOUT_S:.0f}s of the signal")
        alive = wait_for_no_processes(session.pid, SERVER_EXIT_S)
        if alive:
            self.problems.append(
                f"{name}: tritonserver/stub processes still alive "
                f"{SERVER_EXIT_S:.0f}s after the session ended: "
                f"{[p.pid for p in alive]}"
            )
        if REAPED in session.output:  # this session passed its reaping points
            for pid, earlier in list(self.unreaped.items()):
                if left_by(pid, self.tmpdir):
                    self.problems.append(
                        f"{name} did not reap what {earlier.describe()} "
                        f"left:\n{left_by(pid, self.tmpdir)}"
                    )
                else:
                    self.reaped += 1
                del self.unreaped[pid]
        left = left_by(session.pid, self.tmpdir)
        if left and session.signalled and session.signal == signal.SIGKILL:
            self.unreaped[session.pid] = session
        elif left:
            self.problems.append(f"{name} left behind:\n{left}\n{session.interrupted_in()}")
        if not session.signalled and session.code != 0:
            self.problems.append(f"{name} failed without interruption:\n{session.output[-3000:]}")

    def run(self) -> None:
        for sig, share in self.plan:
            session = Session(self.project, self.tmpdir, sig, share * self.whole_s).run()
            self.done.append(session)
            self.check(session)
            if not session.signalled and session.code == 0:  # it ended before its signal
                self.whole_s = min(self.whole_s, session.wall_s)


def in_parallel(jobs: list[Callable[[], object]]) -> None:
    threads = [threading.Thread(target=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_interrupted_sessions_leave_nothing_behind(tmp_path: Path) -> None:
    seed = int(os.environ.get("PYTEST_TRITON_INTERRUPT_SEED") or time.time_ns() % 2**32)
    replay = f"interrupt points from seed {seed} (replay: PYTEST_TRITON_INTERRUPT_SEED={seed})"
    print(replay)
    project = tmp_path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_tiny.py").write_text(TEST)
    tmpdirs = [tmp_path / f"lane{i}" / "tmp" for i in range(LANES)]
    for d in tmpdirs:
        d.mkdir(parents=True)

    # Whole sessions first: they pass, leave nothing, and tell how long a session takes.
    wholes = [Session(project, d) for d in tmpdirs]
    in_parallel([w.run for w in wholes])
    for whole, d in zip(wholes, tmpdirs, strict=True):
        assert whole.code == 0 and "1 passed" in whole.output, whole.output[-3000:]
        assert not left_by(whole.pid, d), left_by(whole.pid, d)
    # Sessions later in the run can be faster than these (the machine's other tests, warm
    # caches): each lane signals at a share of the shortest whole session it has seen, so
    # that the signals land while sessions still run however the machine's load changes.
    duration = min(w.wall_s for w in wholes)

    rng = random.Random(seed)
    kinds = [signal.SIGINT, signal.SIGKILL]
    plan = [(kinds[(i // LANES) % 2], rng.uniform(0.05, 0.95)) for i in range(RUNS)]
    lanes = [Lane(project, tmpdirs[i], plan[i::LANES], duration) for i in range(LANES)]
    in_parallel([lane.run for lane in lanes])

    # One more whole session per lane: it passes and reaps whatever a SIGKILL left there.
    finals = [Session(project, lane.tmpdir) for lane in lanes]
    in_parallel([f.run for f in finals])
    problems = [p for lane in lanes for p in lane.problems]
    for lane, final in zip(lanes, finals, strict=True):
        if final.code != 0:
            problems.append(f"final {final.describe()} failed:\n{final.output[-3000:]}")
        for session in [*lane.done, final]:
            left = left_by(session.pid, lane.tmpdir)
            if left:
                problems.append(
                    f"{session.describe()} left behind, even after the final session:\n{left}"
                )
    sessions = [s for lane in lanes for s in lane.done]
    summary = "\n".join(f"  {s.describe()}" for s in sessions)
    assert sum(s.signalled for s in sessions) >= RUNS * 3 // 4, (
        f"{replay}: too few sessions were still running when signalled:\n{summary}"
    )
    assert not problems, f"{replay}\n" + "\n\n".join(problems) + f"\nsessions:\n{summary}"
    reaped = sum(lane.reaped for lane in lanes)
    print(
        f"{len(sessions)} sessions interrupted (a whole one took {duration:.1f}s); what "
        f"{reaped} killed sessions left on disk was removed by the session after them:\n"
        f"{summary}"
    )


def test_a_temporary_repository_left_to_exit_is_removed(tmp_path: Path) -> None:
    """The deterministic case of a Ctrl-C that skipped the repository fixture's teardown."""
    code = (
        "from pytest_triton.repository.builder import Repository\n"
        "print(Repository.create([]).root)\n"
    )
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    root = Path(done.stdout.strip())
    assert root.parent == tmp_path and not root.exists()
