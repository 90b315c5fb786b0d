"""The suite's warm starts (tests/helpers/warm_start.py): a process forked from a warm
interpreter must be what `python -m MODULE` would have started: the same argv, working
directory, environment, sys.path, streams, fresh random state, exit codes and deaths by
signal, its own session, what importing read from the environment (TMPDIR). Each is
compared with a cold start of the same command. A warm interpreter started from a thread
outlives that thread (the sessions of test_interrupted_sessions.py start from threads), and
starts from several threads at once each get their own child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers import warm_start

PROBE = textwrap.dedent("""
    import json, os, sys, tempfile
    import numpy as np

    def test_probe():
        with open(os.environ["PROBE_OUT"], "w") as f:
            json.dump({
                "pid": os.getpid(),
                "argv": sys.argv[1:],
                "cwd": os.getcwd(),
                "path": sys.path[:2],
                "env": os.environ.get("PROBE_VALUE"),
                "random": float(np.random.random()),
                "sid": os.getsid(0) == os.getpid(),
                "stdin": os.read(0, 100).decode(),
                "tmp": tempfile.gettempdir(),
            }, f)
        assert os.environ.get("PROBE_FAIL") != "1"
""")


def start(
    tmp_path: Path,
    tag: str,
    *,
    cold: bool,
    interpreter: warm_start.WarmInterpreter | None = None,
    plugin: bool = True,
    **env: str,
) -> Any:
    (tmp_path / "test_probe.py").write_text(PROBE)
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
        "PROBE_OUT": str(tmp_path / f"{tag}.json"),
        "PROBE_VALUE": tag,
        "TMPDIR": str(tmp_path),
        **env,
    }
    return warm_start.popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *([] if plugin else ["-p", "no:triton"]),
            "test_probe.py",
        ],
        env=environment,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cold=cold,
        interpreter=interpreter,
    )


def test_a_warm_start_is_what_a_cold_one_would_be(tmp_path: Path) -> None:
    cold = start(tmp_path, "cold", cold=True)
    warm = start(tmp_path, "warm", cold=False)
    again = start(tmp_path, "again", cold=False)
    assert isinstance(warm, warm_start.WarmProcess) and not isinstance(cold, warm_start.WarmProcess)
    outputs = {}
    for tag, proc in (("cold", cold), ("warm", warm), ("again", again)):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        assert "1 passed" in out
        outputs[tag] = json.loads((tmp_path / f"{tag}.json").read_text())
    c, w = outputs["cold"], outputs["warm"]
    for key in ("argv", "cwd", "path", "sid", "stdin"):
        assert c[key] == w[key], key
    assert (c["env"], w["env"]) == ("cold", "warm")
    assert c["tmp"] == w["tmp"] == str(tmp_path)  # read from the child's environment
    assert c["sid"] is True and c["stdin"] == ""
    assert w["random"] != outputs["again"]["random"]  # numpy reseeded in each child


def test_exit_codes_and_signals_come_back_as_popen_gives_them(tmp_path: Path) -> None:
    failed = start(tmp_path, "failed", cold=False, PROBE_FAIL="1")
    assert failed.wait(120) == 1
    sleeper = tmp_path / "sleeper"
    sleeper.mkdir()
    (sleeper / "test_sleep.py").write_text("import time\ndef test_sleep():\n    time.sleep(60)\n")
    for sig, expected in ((signal.SIGTERM, -signal.SIGTERM), (signal.SIGKILL, -signal.SIGKILL)):
        proc = warm_start.popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_sleep.py"],
            env=dict(os.environ),
            cwd=sleeper,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert isinstance(proc, warm_start.WarmProcess)
        assert proc.poll() is None and psutil.pid_exists(proc.pid)
        time.sleep(1)
        proc.send_signal(sig)
        assert proc.wait(30) == expected


def test_only_known_modules_start_warm() -> None:
    python = sys.executable
    assert warm_start.kind_of([python, "-m", "locust", "-f", "x.py"]) == (
        "locust",
        "locust",
        ["-f", "x.py"],
    )
    assert warm_start.kind_of([python, "-mpytest", "-q"]) == ("pytest", "pytest", ["-q"])
    assert warm_start.kind_of([python, "-m", "pytest_triton.cli.triton_tune"]) is None
    assert warm_start.kind_of([python, "-c", "pass"]) is None
    assert warm_start.kind_of(["ip", "netns", "exec", "h", python, "-m", "locust"]) is None


def test_a_warm_interpreter_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG would have killed it when that thread ended, and every later start
    of its kind with it (an interpreter of its own: this process's stay as they are)."""
    made: list[warm_start.WarmInterpreter] = []
    thread = threading.Thread(
        target=lambda: made.append(warm_start.WarmInterpreter("pytest", dict(os.environ)))
    )
    thread.start()
    thread.join()
    (interpreter,) = made
    try:
        time.sleep(0.5)
        child = start(tmp_path, "later", cold=False, interpreter=interpreter)
        assert isinstance(child, warm_start.WarmProcess) and child.wait(120) == 0
        assert interpreter.proc.poll() is None
    finally:
        interpreter.close()
    assert interpreter.proc.poll() == 0  # closing its socket ends it (not a kill after 10 s)


def test_starts_from_several_threads_at_once_each_get_their_own_child(tmp_path: Path) -> None:
    """Two lanes of test_interrupted_sessions.py start sessions at the same moment from one
    worker's warm interpreter (this process's, here too): a session that held the other's
    child waited on the wrong process and read its own log while its own pytest still wrote
    it (CI, stop 40)."""
    threads = 6
    together = threading.Barrier(threads)
    started: dict[int, Any] = {}

    def one(i: int) -> None:
        folder = tmp_path / f"t{i}"
        folder.mkdir()
        together.wait()
        # (without pytest-triton: only the handles are under test, not the plugin's import)
        started[i] = start(folder, "t", cold=False, plugin=False)

    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    for i, proc in sorted(started.items()):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        assert json.loads((tmp_path / f"t{i}" / "t.json").read_text())["pid"] == proc.pid


def test_communicate_gives_up_after_its_timeout_as_popen_does(tmp_path: Path) -> None:
    """Reading included: a child that never closes its pipes raises TimeoutExpired."""
    (tmp_path / "test_sleep.py").write_text("import time\ndef test_sleep():\n    time.sleep(60)\n")
    proc = warm_start.popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:triton"],
        env=dict(os.environ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert isinstance(proc, warm_start.WarmProcess)
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=2)
        assert time.monotonic() - started < 10
        assert proc.poll() is None  # left running, as Popen leaves it
    finally:
        proc.kill()
    assert proc.wait(30) == -signal.SIGKILL
