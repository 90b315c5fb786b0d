"""Running Locust from the tests: always a subprocess (importing locust would monkey-patch
pytest's own process with gevent), always under a hard timeout, never leaving processes."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from pytest_triton.base import setup_steps
from tests.helpers import warm_start

REPO = Path(__file__).resolve().parents[2]
PROBE_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "probe.py"
LOCUSTFILES = REPO / "locustfiles"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> dict[str, Any] | None:
    """A web UI's JSON answer; None while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]
    except OSError:
        return None


def subprocess_env(**extra: str) -> dict[str, str]:
    """This environment without any TRITON_* setting (tests must not inherit targets), with
    the checkout importable (the probe locustfile imports tests.load)."""
    env = {  # nor xdist's: a Locust run is not a worker of the suite's xdist
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "LOCUST_", "PYTEST_XDIST_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # Windows of a few seconds beside the suite's other workers agree within 10% by chance:
    # only the tests of stability itself (test_measurement.py, test_run_length.py) and the
    # load page's first example (tests/docs/test_load_page.py) ask for it.
    env["TRITON_ALLOW_UNSTABLE"] = "true"
    env.update(extra)
    return env


def probe_report(module: str, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run a probe (`python -m tests.helpers.X ARGS`: gevent-patched work kept out of
    pytest's process) and read the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=subprocess_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@dataclass
class Finished:
    code: int
    stdout: str
    stderr: str
    wall_s: float
    report: dict[str, Any] | None = None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


@dataclass
class Locust:
    """A running locust (or triton-perf) subprocess whose output is drained as it comes."""

    args: Sequence[str]
    report_path: Path | None = None
    env: dict[str, str] = field(default_factory=subprocess_env)
    cold: bool = False  # a new interpreter, not one forked from a warm one (warm_start.py)
    proc: subprocess.Popen[str] | warm_start.WarmProcess = field(init=False)
    started: float = field(init=False)
    _out: list[str] = field(default_factory=list, init=False)
    _err: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        setup_steps.say(f"{self.what} ...")
        # Own session: a timeout can kill the whole tree.
        self.proc = warm_start.popen(
            list(self.args),
            cwd=REPO,
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cold=self.cold,
        )
        for stream, sink in ((self.proc.stdout, self._out), (self.proc.stderr, self._err)):
            threading.Thread(target=self._drain, args=(stream, sink), daemon=True).start()

    @property
    def what(self) -> str:
        """Which tool ran on what, for progress lines: `locust -f dlrm.py`."""
        args = [str(a) for a in self.args]
        tool = "triton-perf" if "pytest_triton.cli.triton_perf" in args else Path(args[0]).name
        if "-m" in args and args[args.index("-m") + 1] == "locust":
            tool = "locust"
        target = next((Path(args[i + 1]).name for i, a in enumerate(args[:-1]) if a == "-f"), "")
        return f"{tool} -f {target}" if target else tool

    @staticmethod
    def _drain(stream: Any, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    @property
    def stderr_so_far(self) -> str:
        return "".join(self._err)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr_so_far + "".join(self._out):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"{text!r} never appeared:\n{self.finish(5).tail()}")
            time.sleep(0.1)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> None:
        """SIGTERM the tree, SIGKILL what is left after 20 s (the hard timeout's last step)."""
        procs = self.descendants()
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.insert(0, psutil.Process(self.proc.pid))
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=20)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def finish(self, timeout: float) -> Finished:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out = "".join(self._out) + "".join(self._err)
            pytest.fail(
                f"{' '.join(map(str, self.args[:6]))} ... did not finish within "
                f"{timeout:.0f}s (hung?); killed it. Output tail:\n"
                + "\n".join(out.splitlines()[-60:])
            )
        time.sleep(0.1)  # let the drain threads catch the last lines
        setup_steps.say(f"{self.what} exited {code} in {time.monotonic() - self.started:.1f}s")
        report = None
        if self.report_path is not None and self.report_path.exists():
            report = json.loads(self.report_path.read_text())
        return Finished(
            code, "".join(self._out), "".join(self._err), time.monotonic() - self.started, report
        )


SHORT_PERF_POINT = (  # 200 ms of warm-up, then three 500 ms windows (stable within 50% or not)
    "--triton-load-warmup",
    "200",
    "--triton-measurement-interval",
    "500",
    "--triton-stability-percentage",
    "50",
    "--max-trials",
    "3",
    "--no-progress",
)
"""triton-perf's settings for a short point, where its figures are not the subject."""


def triton_perf_args(model: str) -> list[str]:
    """The start of a triton-perf command line for `model` (as `python -m`, so that the
    checkout's code runs); the test adds the rest."""
    return [sys.executable, "-m", "pytest_triton.cli.triton_perf", "-m", model]


def locust_args(locustfile: Path, *args: str, report: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "locust", "-f", str(locustfile), *args]
    if report is not None:
        cmd += ["--triton-report-json", str(report)]
    return cmd


def run_locust(
    locustfile: Path,
    *args: str,
    tmp_path: Path,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> Finished:
    report = tmp_path / f"report-{time.monotonic_ns()}.json"
    run = Locust(locust_args(locustfile, *args, report=report), report, env or subprocess_env())
    return run.finish(timeout)


def tritonservers(processes: Sequence[psutil.Process]) -> list[psutil.Process]:
    found = []
    for p in processes:
        try:
            if p.name() == "tritonserver":
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found
