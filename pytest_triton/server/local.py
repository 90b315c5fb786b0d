"""Local launcher: a `tritonserver` child process on ephemeral loopback ports.

The binary is --triton-executable, else `tritonserver` on PATH, else the one bundled in the
nvidia-pytriton wheel (python backend only). The child dies with this process (PDEATHSIG),
is stopped by terminate -> timeout -> kill, and its whole process group (python backend
stubs included) is killed at the end, so no server outlives a session, even on Ctrl-C.
"""

from __future__ import annotations

import compileall
import contextlib
import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from pytest_triton.base.config import Numerics
from pytest_triton.base.errors import ConfigError, ServerError
from pytest_triton.base.processes import (
    die_with_parent,
    group_members,
    interrupts_deferred,
    kill_group,
    process_alive,
    reap_orphaned,
)
from pytest_triton.base.server_offer import NO_TENSORRT, ServerTarget
from pytest_triton.base.urls import Endpoints
from pytest_triton.client.triton_client import release_connections
from pytest_triton.server import hosted_env, tensorrt
from pytest_triton.server.launcher import (
    LIVE_SERVERS,
    RunningServer,
    ServerArgs,
    free_ports,
    needs_auto_complete,
    port_conflict,
    wait_until_ready,
)

PORT_ATTEMPTS = 3
WORKDIR_PREFIX = "pytest-triton-server-"
SHM_PREFIX = "pytest_triton_"
WATCH_INTERVAL_S = 0.1  # how soon a dead server is noticed
_SERVER_NUMBERS = itertools.count()
TF32_OVERRIDE = "NVIDIA_TF32_OVERRIDE"
WAIT_POLICY = "OMP_WAIT_POLICY"
"""How the stubs' idle worker threads wait (torch's libgomp reads it; hosted_model.py gives
onnxruntime the same): PASSIVE unless the environment says ACTIVE. Several instances share
the CPU's cores with the server and the tests, and a spinning thread burns the core another
one needs: a torch-hosted DLRM request cost the server 37 ms of CPU spinning and 2.5 ms
passive on two busy cores (benchmarks/stub_wait.py)."""


@dataclass(frozen=True)
class Installation:
    """Where a tritonserver binary, its backends and its libraries live."""

    executable: Path
    backend_dir: Path | None
    python_stub: Path | None  # bundled builds ship one stub per Python version, to be placed
    library_dirs: tuple[Path, ...] = ()

    @property
    def backends(self) -> frozenset[str]:
        if self.backend_dir is None or not self.backend_dir.is_dir():
            return frozenset()
        return frozenset(p.name for p in self.backend_dir.iterdir() if p.is_dir())


def _bundled() -> Installation | None:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    exe = root / "bin" / "tritonserver"
    if not exe.exists():
        return None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        have = sorted(p.name for p in (root / "python_backend_stubs").iterdir())
        raise ConfigError(
            f"the tritonserver bundled in nvidia-pytriton has python backend stubs for Python "
            f"{', '.join(have)}, not {version}: run pytest under one of those, or pass "
            "--triton-executable for a tritonserver built for this Python"
        )
    return Installation(
        exe, root / "backends", stub, (root.parent.parent / "nvidia_pytriton.libs",)
    )


def find_installation(executable: str | None = None) -> Installation:
    """--triton-executable, else PATH, else the nvidia-pytriton bundle; a clear error if none."""
    if executable:
        exe = Path(executable).expanduser()
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            raise ConfigError(
                f"--triton-executable {executable!r} is not an executable file; point it at a "
                "tritonserver binary (e.g. /opt/tritonserver/bin/tritonserver)"
            )
        return Installation(exe.resolve(), exe.resolve().parent.parent / "backends", None)
    on_path = shutil.which("tritonserver")
    if on_path:
        exe = Path(on_path).resolve()
        return Installation(exe, exe.parent.parent / "backends", None)
    bundled = _bundled()
    if bundled is not None:
        return bundled
    raise ConfigError(
        "no tritonserver found: install the bundled one with `pip install 'pytest-triton[local]'`"
        " (nvidia-pytriton), put tritonserver on PATH, pass --triton-executable PATH, or use "
        "--triton-launcher container / --triton-url URL"
    )


def server_environment(
    install: Installation,
    *,
    gpus: str | None = None,
    numerics: Numerics = "strict",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The server's environment: this interpreter's packages for the python stub, the
    bundle's libraries, idle threads that sleep (WAIT_POLICY), the GPUs it may use (`gpus`:
    None, "all" or "0,1") and TF32 off
    (NVIDIA_TF32_OVERRIDE=0, read by cuBLAS and cuDNN in every backend) for strict numerics,
    or left as the backends ship it for production numerics."""
    env = dict(os.environ if base is None else base)
    # The python stub embeds libpython and takes site-packages from the first python3 on
    # PATH (PYTHONPATH is ignored): put this interpreter's environment first.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    libs = [str(d) for d in install.library_dirs]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libs.insert(0, str(sysconfig.get_config_var("LIBDIR")))
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep __pycache__ out of model repositories
    env.setdefault(WAIT_POLICY, "PASSIVE")
    if gpus is not None and gpus != "all":
        env["CUDA_VISIBLE_DEVICES"] = gpus
    if numerics == "strict":
        env[TF32_OVERRIDE] = "0"
    else:
        env.pop(TF32_OVERRIDE, None)
    return env


class LocalServer(RunningServer):
    launcher = "local"
    host_memory = True  # a child process on this machine maps our /dev/shm

    def __init__(
        self,
        install: Installation,
        args: ServerArgs,
        workdir: Path,
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.model_control_mode = args.model_control_mode
        self.repository_path = Path(args.model_repository)
        self.backends = install.backends
        self._exit_timeout = args.exit_timeout_s
        self._final_log: str | None = None  # set once stopped
        self._stop_lock = threading.RLock()
        http, grpc, metrics = free_ports(3, args.address)
        host = f"[{args.address}]" if ":" in args.address else args.address
        self.endpoints = Endpoints(f"{host}:{http}", f"{host}:{grpc}", f"{host}:{metrics}")
        backend_dir = self._stage_backends(install)
        cmd = args.command(
            str(install.executable),
            repository=str(args.model_repository),
            http_port=http,
            grpc_port=grpc,
            metrics_port=metrics,
            backend_directory=str(backend_dir) if backend_dir else None,
            auto_complete=self.backends != {"python"}
            or needs_auto_complete(Path(args.model_repository)),
        )
        # The python backend's shared-memory regions outlive a killed server; a prefix of
        # our own lets stop() remove them whatever way the server ended.
        self.shm_prefix = f"{SHM_PREFIX}{os.getpid()}_{next(_SERVER_NUMBERS)}_"
        if "python" in self.backends:
            cmd.append(f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}")
        self.command = cmd
        self._log_path = workdir / "tritonserver.log"
        # Triton's copies of models loaded with their files in the request, as the watcher
        # last saw them: a killed server's stubs may be gone before it is found dead.
        self.copies: set[Path] = set()
        # Temporary files of the server and its stubs (AOTInductor unpacks each package it
        # loads into one, and a killed stub never removes it) go with the work directory.
        scratch = workdir / "tmp"
        scratch.mkdir()
        server_env = {
            **(env if env is not None else server_environment(install)),
            "TMPDIR": str(scratch),
        }
        owned = False
        try:
            # A Ctrl-C while Popen waits for the child's exec would raise with the server
            # started and no Popen to stop it by: the signal waits until stop() can.
            with interrupts_deferred():
                with open(self._log_path, "wb") as log:
                    self.process = subprocess.Popen(
                        cmd,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=server_env,
                        cwd=workdir,
                        start_new_session=True,
                        preexec_fn=die_with_parent,
                    )
                owned = True
                LIVE_SERVERS.add(self)
            self.start_watcher()
        except BaseException:
            if owned:
                self.stop()
            raise

    def _stage_backends(self, install: Installation) -> Path | None:
        """Bundled builds need the stub for this Python next to libtriton_python.so."""
        if install.python_stub is None or install.backend_dir is None:
            return (
                install.backend_dir
                if install.backend_dir and install.backend_dir.is_dir()
                else None
            )
        staged = self.workdir / "backends"
        shutil.copytree(install.backend_dir, staged, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(install.python_stub, staged / "python" / install.python_stub.name)
        # A stub starting writes its utilities' bytecode here (PYTHONDONTWRITEBYTECODE or
        # not), and importlib makes every missing parent of a .pyc: one writing as stop()
        # removes the directory would make it again. Compiled now, no stub writes here.
        compileall.compile_dir(staged / "python", maxlevels=0, quiet=1)
        return staged

    def log_text(self) -> str:
        if self._final_log is not None:
            return self._final_log
        try:
            return self._log_path.read_text(errors="replace")
        except OSError:
            return ""

    def exit_code(self) -> int | None:
        return self.process.poll()

    def wait_for_exit(self) -> int | None:
        """Poll rather than block in waitid(): in a gevent-patched process (Locust) a "thread"
        is a greenlet, and a blocking wait there would freeze every user and the server start.
        poll() is non-blocking and never holds Popen's lock across a wait."""
        refreshed, logged = 0.0, 0
        while not self.stopping:
            code = self.process.poll()
            if code is not None:
                return code
            # A model loaded (its stub started) writes to the log: only then are the stubs
            # read again, at most once a second.
            if self.model_control_mode == "explicit" and time.monotonic() > refreshed + 1.0:
                size = self._log_size()
                if size != logged:
                    self.copies |= localized_copies(group_members(self.process.pid))
                    refreshed, logged = time.monotonic(), size
            time.sleep(WATCH_INTERVAL_S)
        return None

    def died(self, code: int) -> None:
        """Its python backend stubs outlive a killed server and keep its accepted sockets
        open (an HTTP request would wait for its whole timeout): kill the group first."""
        kill_server_group(self.process.pid, self.copies)
        super().died(code)

    def stop(self) -> None:
        """SIGTERM the server, SIGKILL it after its exit timeout, then its stubs; idempotent."""
        self.stopping = True
        with self._stop_lock:
            if self._final_log is None:
                self._stop()
            LIVE_SERVERS.discard(self)

    def _stop(self) -> None:
        try:
            if self.process.poll() is None:
                release_connections([self.endpoints.http, self.endpoints.grpc])
                _wait_for_closes_seen(self.process.pid)
                logged = self._log_size()
                self.process.terminate()
                if self._drained_after(logged, self._exit_timeout + 5):
                    kill_server_group(self.process.pid, self.copies)  # the server, its stubs
                try:
                    self.process.wait(self._exit_timeout + 5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        finally:
            # A Ctrl-C in the middle would leave files no later stop() removes: it waits.
            with interrupts_deferred():
                kill_server_group(self.process.pid, self.copies)  # stubs left in the group
                log = self.log_text()
                shutil.rmtree(self.workdir, ignore_errors=True)
                for region in Path("/dev/shm").glob(f"{self.shm_prefix}*"):
                    with contextlib.suppress(OSError):
                        region.unlink()
                self._final_log = log  # stopped: only once all of it is gone

    def _log_size(self) -> int:
        try:
            return self._log_path.stat().st_size
        except OSError:
            return 0

    def _drained_after(self, offset: int, within_s: float) -> bool:
        """Whether, after a SIGTERM, the server says its in-flight requests are done before
        it exits. What is left of its stop is the models' finalization: a python stub takes
        about a second each to exit and Triton notices on 1-s ticks (seconds a server,
        longer with many models), while no request can reach it any more."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with open(self._log_path, "rb") as log:
                    log.seek(offset)
                    if DRAINED in log.read():
                        return True
            except OSError:
                return False
            time.sleep(0.02)
        return False


DRAINED = b"All models are stopped, unloading models"
CLOSES_SEEN_WITHIN_S = 2.0


def _wait_for_closes_seen(pid: int) -> None:
    """Let the server close its side of the connections our clients just closed: a socket in
    CLOSE_WAIT is one whose close the kernel has and Triton's event loop has not handled yet,
    and a SIGTERM then makes Triton wait its exit timeout for it (seen on a busy machine)."""
    deadline = time.monotonic() + CLOSES_SEEN_WITHIN_S
    while time.monotonic() < deadline:
        try:
            sockets = psutil.Process(pid).net_connections("tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return
        if not any(c.status == psutil.CONN_CLOSE_WAIT for c in sockets):
            return
        time.sleep(0.02)


LOCALIZED_COPY = "/tmp/folder"
"""Where Triton copies a model loaded with its files in the request (a fixed mkdtemp template in
Triton's core, not TMPDIR); the server removes a copy when it unloads the model, a killed one
never does."""


def copy_run_from(argv: Sequence[str]) -> Path | None:
    """The model copy a python stub runs from (its first argument is its model.py), if any."""
    if len(argv) > 1 and argv[1].startswith(LOCALIZED_COPY):
        return Path(*Path(argv[1]).parts[:3])
    return None


def localized_copies(pids: Iterable[int]) -> set[Path]:
    """The model copies the python stubs among `pids` run from."""
    copies = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            copy = copy_run_from(psutil.Process(pid).cmdline())
            if copy is not None:
                copies.add(copy)
    return copies


def remove_copies(copies: Iterable[Path]) -> None:
    for copy in copies:
        shutil.rmtree(copy, ignore_errors=True)


def kill_server_group(pgid: int, known: Iterable[Path] = ()) -> None:
    """SIGKILL a server's group (the server, its stubs) and remove the model copies its
    stubs ran from (those `known` and those its stubs show now), which the killed server
    can no longer remove."""
    copies = localized_copies(group_members(pgid)) | set(known)
    kill_group(pgid)
    remove_copies(copies)


def reap_orphan_servers() -> list[Path]:
    """Remove work directories and shared-memory regions of servers whose pytest was killed
    outright (the server itself died with it by PDEATHSIG), and kill what still runs from
    such a directory first."""
    kill_orphan_stubs()
    return reap_orphaned(tempfile.gettempdir(), WORKDIR_PREFIX, "-") + reap_orphaned(
        "/dev/shm", SHM_PREFIX, "_"
    )


def kill_orphan_stubs() -> list[int]:
    """Kill processes running from the work directory of a server whose owner is gone: python
    stubs can outlive a server that died with its owner (seen after a killed xdist run: the
    zoo server's stubs, reparented to init, each spinning a core for minutes)."""
    marker = os.path.join(tempfile.gettempdir(), WORKDIR_PREFIX)
    killed = []
    copies: set[Path] = set()
    for process in psutil.process_iter(["cmdline"]):
        argv = process.info["cmdline"] or []
        first = argv[0] if argv else ""
        if not first.startswith(marker):
            continue
        owner = first[len(marker) :].split("-", 1)[0]
        if owner.isdigit() and not process_alive(int(owner)):
            copy = copy_run_from(argv)
            if copy is not None:
                copies.add(copy)
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
                killed.append(process)
    psutil.wait_procs(killed, timeout=5)
    remove_copies(copies)
    return [p.pid for p in killed]


class LocalLauncher:
    """Starts tritonserver as a child process of this one; on GPUs with `gpus` ("all" or
    "0,1"), on the CPU without."""

    name = "local"

    def __init__(
        self,
        executable: str | None = None,
        *,
        gpus: str | None = None,
        numerics: Numerics = "strict",
    ) -> None:
        self.install = find_installation(executable)
        self.gpus = gpus
        self.numerics = numerics
        self._target: ServerTarget | None = None
        self._stub_checked = False

    def environment(self) -> dict[str, str]:
        return server_environment(self.install, gpus=self.gpus, numerics=self.numerics)

    def target(self) -> ServerTarget:
        if self._target is None:
            gpu = self.gpus is not None
            self._target = ServerTarget(
                backends=self.install.backends,
                instance_kind="KIND_GPU" if gpu else "KIND_CPU",
                tensorrt_problem=self._tensorrt_problem(),
                numerics=self.numerics,
                onnx_gpu_problem=hosted_env.onnx_cuda_problem() if gpu else None,
            )
        return self._target

    def _tensorrt_problem(self) -> str | None:
        if self.gpus is None:
            return NO_TENSORRT
        if "tensorrt" not in self.install.backends:
            return (
                f"the local tritonserver ({self.install.executable}) has no tensorrt "
                "backend: run inside an NGC image with --triton-executable "
                "/opt/tritonserver/bin/tritonserver, or use --triton-launcher container"
            )
        return tensorrt.plan_problem(
            str(self.install.executable), tensorrt.local_version(), tensorrt.host_version()
        )

    def check_environment(self) -> None:
        """The bundled stub's numpy, before any model loads (ConfigError with the fix)."""
        if (
            not self._stub_checked
            and self.install.python_stub is not None
            and "python" in self.install.backends
        ):
            hosted_env.check_stub_numpy(self.environment())
        self._stub_checked = True

    def start(self, args: ServerArgs) -> LocalServer:
        self.check_environment()
        reap_orphan_servers()
        env = self.environment()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            server = self._spawn(args, env)
            try:
                wait_until_ready(server, args.startup_timeout_s)
                return server
            except ServerError:
                retry = attempt < PORT_ATTEMPTS and port_conflict(server.log_text())
                server.stop()
                if not retry:
                    raise
            except BaseException:
                server.stop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _spawn(self, args: ServerArgs, env: Mapping[str, str]) -> LocalServer:
        """A server process in a work directory of its own; on any failure, a Ctrl-C while
        the directory is made included, neither is left."""
        workdir: Path | None = None
        try:
            with interrupts_deferred():
                workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
            return LocalServer(self.install, args, workdir, env=env)
        except BaseException:
            if workdir is not None:
                with interrupts_deferred():
                    shutil.rmtree(workdir, ignore_errors=True)
            raise
