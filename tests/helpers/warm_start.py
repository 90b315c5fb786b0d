"""Python processes the tests start, forked from an interpreter that has already imported
what they import: the suite's own start-up cost, not a product feature.

A Locust run or a pytest session the tests start spends about 3 s of CPU importing locust,
torch, tritonclient and pytest-triton before it does anything, and the suite starts a few
hundred of them (a third of its CPU on the 2-core machine). Each xdist worker keeps one
*warm* interpreter per kind (`locust`, `pytest`): started once, it imports those modules
and then only forks. A child sets up what `subprocess.Popen` would have given a new
process (its argv, environment, working directory, sys.path from PYTHONPATH, standard
streams, its own session, default signal handlers), then runs `python -m MODULE` as the
interpreter would (runpy, atexit handlers, exit code). The test gets a `WarmProcess`, which
answers as a Popen does (pid, poll, wait, send_signal, stdout, stderr): the warm
interpreter reports each child's exit status to it.

What a warm start cannot be, a cold one is: a command that is not `python -m locust`,
`python -m pytest_triton.cli.triton_perf` or pytester's `python -mpytest`, a test that
needs its process's own imports (`cold=True`), and every start when
PYTEST_TRITON_TESTS_COLD_START=1.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

COLD = "PYTEST_TRITON_TESTS_COLD_START"
REPO = Path(__file__).resolve().parents[2]
# the front ends that turn gRPC's fork handlers off when imported (base/grpc_fork.py)
FRONT_ENDS = ("pytest_triton.plugin", "pytest_triton.load", "pytest_triton.cli")
# the modules each kind runs, and what its warm interpreter imports first
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "locust": (
        ("locust", "pytest_triton.cli.triton_perf"),
        (
            "locust",
            "locust.main",
            "torch",
            "pytest_triton.load.users",
            "pytest_triton.load.runner.embedded",
            "pytest_triton.cli.triton_perf",
            "pytest_triton.repository",
            "tests.helpers.probe_models",
        ),
    ),
    # not pytest_triton itself: pytest rewrites the asserts of its plugins' modules, and
    # warns about one imported before the session starts
    "pytest": (
        ("pytest",),
        ("pytest", "torch", "numpy", "psutil", "tritonclient.http", "tritonclient.grpc"),
    ),
}
_HEADER = struct.Struct("!I")


def kind_of(args: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """(kind, module, its arguments) of a `python -m MODULE ...` command a warm interpreter
    can run; None for any other command."""
    if os.environ.get(COLD) == "1" or len(args) < 2 or args[0] != sys.executable:
        return None
    if args[1] == "-m" and len(args) > 2:
        module, rest = args[2], list(args[3:])
    elif args[1].startswith("-m") and len(args[1]) > 2:
        module, rest = args[1][2:], list(args[2:])
    else:
        return None
    for kind, (modules, _) in KINDS.items():
        if module in modules:
            return kind, module, rest
    return None


# -- the test's side ----------------------------------------------------------------------------
class WarmProcess:
    """A child of a warm interpreter, answering as subprocess.Popen does."""

    def __init__(self, pid: int, stdout: IO[Any] | None, stderr: IO[Any] | None) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.stdin: IO[Any] | None = None
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _exit(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Both pipes read at once, as Popen does (a child that fills one while the other is
        read would wait forever), and TimeoutExpired after `timeout`, reading included (the
        child is left running, as Popen leaves it)."""
        read: dict[str, Any] = {}
        readers = [
            threading.Thread(target=lambda n=name, s=stream: read.__setitem__(n, s.read()))
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return read.get("out"), read.get("err")

    def __enter__(self) -> WarmProcess:
        return self

    def __exit__(self, *_: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


class WarmInterpreter:
    """One warm interpreter of this process: spawns children, hears their exits."""

    def __init__(self, kind: str, env: Mapping[str, str]) -> None:
        self.kind = kind
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        # A child's exit always comes after its spawn reply: the reader makes the child's
        # WarmProcess when it reads the reply, and finds it there when it reads the exit.
        self.spawned: dict[int, WarmProcess] = {}
        self.replies: list[WarmProcess | None] = []  # None: the warm interpreter is gone
        self.reply_ready = threading.Condition()
        # one spawn at a time, request and reply: two threads waiting on replies at once
        # could each take the other's (a session then waits on another session's child)
        self.spawning = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.warm_start", kind, str(theirs.fileno())],
            cwd=REPO,
            env=dict(env),
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None,
            start_new_session=True,
        )
        theirs.close()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        stream = self.sock.makefile("rb")
        for line in stream:
            message = json.loads(line)
            if "spawned" in message:
                pid = int(message["spawned"])
                child = self.spawned[pid] = WarmProcess(pid, None, None)
                with self.reply_ready:
                    self.replies.append(child)
                    self.reply_ready.notify_all()
            else:
                self.spawned.pop(int(message["exited"]))._exit(int(message["status"]))
        with self.reply_ready:  # the warm interpreter is gone
            self.replies.append(None)
            self.reply_ready.notify_all()

    def spawn(
        self,
        module: str,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        fds: tuple[int, int, int],
        new_session: bool,
    ) -> WarmProcess:
        request = json.dumps(
            {
                "module": module,
                "args": list(args),
                "env": dict(env),
                "cwd": cwd,
                "new_session": new_session,
            }
        ).encode()
        with self.spawning, self.reply_ready:
            socket.send_fds(self.sock, [_HEADER.pack(len(request)) + request], list(fds))
            while not self.replies:
                if not self.reply_ready.wait(60):
                    raise RuntimeError(f"the warm {self.kind} interpreter does not answer")
            child = self.replies.pop(0)
        if child is None:
            raise RuntimeError(f"the warm {self.kind} interpreter exited")
        return child

    def close(self) -> None:
        with contextlib.suppress(OSError):  # (the reader's makefile() keeps the fd open:
            self.sock.shutdown(socket.SHUT_RDWR)  # close() alone sends no end of file)
            self.sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_WARM: dict[tuple[int, str], WarmInterpreter] = {}
_WARM_LOCK = threading.Lock()


def _warm(kind: str, env: Mapping[str, str]) -> WarmInterpreter:
    key = (os.getpid(), kind)
    with _WARM_LOCK:
        found = _WARM.get(key)
        if found is None or found.proc.poll() is not None:
            found = _WARM[key] = WarmInterpreter(kind, env)
        return found


def warm_interpreters() -> list[WarmInterpreter]:
    """This process's warm interpreters (cpu_log.py counts their children's CPU)."""
    with _WARM_LOCK:
        return [warm for (pid, _), warm in _WARM.items() if pid == os.getpid()]


@atexit.register
def close_all() -> None:
    """The warm interpreters go with the process that started them (also when it is
    killed: see serve())."""
    with _WARM_LOCK:
        for warm in _WARM.values():
            warm.close()
        _WARM.clear()


def popen(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    text: bool = False,
    start_new_session: bool = False,
    cold: bool = False,
    interpreter: WarmInterpreter | None = None,
    **popen_kw: Any,
) -> subprocess.Popen[Any] | WarmProcess:
    """subprocess.Popen(args, ...) for a process the suite starts: forked from a warm
    interpreter where it can be (this process's of the command's kind, or `interpreter`;
    stdin is always at its end: /dev/null)."""
    found = None if cold else kind_of([str(a) for a in args])
    if found is None:
        return subprocess.Popen(
            list(args),
            env=dict(env),
            cwd=cwd,
            stdout=stdout,
            stderr=stderr,
            text=text,
            start_new_session=start_new_session,
            stdin=popen_kw.pop("stdin", subprocess.DEVNULL),
            **popen_kw,
        )
    kind, module, rest = found
    closing: list[int] = []

    def target(spec: int | IO[Any] | None, fallback: int) -> tuple[int, IO[Any] | None]:
        if spec == subprocess.PIPE:
            r, w = os.pipe()
            closing.append(w)
            return w, open(r, "r" if text else "rb", encoding="utf-8" if text else None)
        if spec is None:
            return fallback, None
        if spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_WRONLY)
            closing.append(fd)
            return fd, None
        if isinstance(spec, int):
            return spec, None
        return spec.fileno(), None

    stdin = os.open(os.devnull, os.O_RDONLY)
    closing.append(stdin)
    out_fd, out = target(stdout, 1)
    err_fd, err = (out_fd, None) if stderr == subprocess.STDOUT else target(stderr, 2)
    warm = interpreter if interpreter is not None else _warm(kind, env)
    assert warm.kind == kind, f"a {kind} command on a warm {warm.kind} interpreter"
    try:
        child = warm.spawn(
            module, rest, env, os.fspath(cwd), (stdin, out_fd, err_fd), start_new_session
        )
    finally:
        for fd in closing:
            os.close(fd)
    child.stdout, child.stderr = out, err
    return child


# -- the warm interpreter ---------------------------------------------------------------------
def serve(kind: str, fd: int) -> None:
    """Import the kind's modules, then fork a child for each request until the test's
    process closes its end of the socket (the kernel closes it when that process dies;
    not PR_SET_PDEATHSIG, which fires when the *thread* that started us ends)."""
    for name in KINDS[kind][1]:
        __import__(name)
    fork, waitpid = _original("os", "fork"), _original("os", "waitpid")
    sock = _original("socket", "socket")(fileno=fd)
    sock.setblocking(True)
    # poll, not select: select() refuses descriptors past 1023, and the socket keeps the
    # number it had in the test's process, which may hold more
    ready = _original("select", "poll")()
    ready.register(sock.fileno(), select.POLLIN)
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [p for p in sys.path[1:] if p not in own]  # the interpreter's own entries
    reply = sock.makefile("wb", buffering=0)
    children: set[int] = set()
    buffer = b""
    while True:
        if ready.poll(50):
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
            if not data:
                return
            buffer += data
            while len(buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(buffer)
                if len(buffer) < _HEADER.size + size:
                    break  # (fds come with a request's first bytes)
                request = json.loads(buffer[_HEADER.size : _HEADER.size + size])
                buffer = buffer[_HEADER.size + size :]
                pid = fork()
                if pid == 0:
                    sock.close()
                    _child(request, fds, path)  # never returns
                for passed in fds:
                    os.close(passed)
                children.add(pid)
                reply.write(json.dumps({"spawned": pid}).encode() + b"\n")
        for pid in list(children):
            done, status = waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                reply.write(json.dumps({"exited": pid, "status": status}).encode() + b"\n")


def _original(module: str, name: str) -> Any:
    """The function before gevent's monkey patching (the locust kind imports locust)."""
    if "gevent" in sys.modules:
        from gevent import monkey

        return monkey.get_original(module, name)
    return getattr(__import__(module), name)


def _child(request: dict[str, Any], fds: list[int], base_path: list[str]) -> None:
    """Become the process `python -m MODULE ARGS` would have been, run it, exit."""
    code = 1
    try:
        if "gevent" in sys.modules:
            import gevent

            gevent.reinit()
        if "numpy" in sys.modules:  # a new interpreter seeds numpy from the OS at import
            sys.modules["numpy"].random.seed()
        if request["new_session"]:
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        # as a new interpreter has them
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # what importing reads from the environment, read again from the child's
        tempfile.tempdir = None
        if any(m in sys.modules for m in FRONT_ENDS):  # base/grpc_fork.py
            os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *extra, *base_path]
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.argv = [request["module"], *request["args"]]
        import runpy

        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            code = _exit_code(exit_.code)
        except KeyboardInterrupt:
            traceback.print_exc()
            code = -signal.SIGINT  # the interpreter dies of the signal then
        except BaseException:
            traceback.print_exc()
            code = 1
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
