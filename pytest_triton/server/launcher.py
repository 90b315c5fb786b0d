"""What every launcher shares: server arguments, readiness, log tails, the running-server API."""

from __future__ import annotations

import atexit
import contextlib
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pytest_triton.base import watched_servers
from pytest_triton.base.config import ModelControl
from pytest_triton.base.errors import ModelLoadError, ServerError
from pytest_triton.base.security import PLAIN, Security
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.base.urls import Endpoints

LOG_TAIL_LINES = 60


@dataclass(frozen=True)
class ServerArgs:
    """tritonserver's command line, independent of where the server runs."""

    model_repository: Path
    model_control_mode: ModelControl = "explicit"
    load_models: tuple[str, ...] = ()
    log_verbose: int = 0
    exit_timeout_s: int = 10
    startup_timeout_s: float = 120.0
    extra_args: tuple[str, ...] = ()
    address: str = "127.0.0.1"  # where a local server listens (loopback unless asked)

    def command(
        self,
        executable: str,
        *,
        repository: str,
        http_port: int,
        grpc_port: int,
        metrics_port: int,
        address: str | None = None,
        backend_directory: str | None = None,
        auto_complete: bool = True,
    ) -> list[str]:
        """The command line; `auto_complete` False turns Triton's config completion off
        (where no model needs it: see needs_auto_complete)."""
        address = address or self.address
        cmd = [
            executable,
            f"--model-repository={repository}",
            f"--model-control-mode={self.model_control_mode}",
            f"--http-address={address}",
            f"--http-port={http_port}",
            f"--grpc-address={address}",
            f"--grpc-port={grpc_port}",
            f"--metrics-address={address}",
            f"--metrics-port={metrics_port}",
            f"--exit-timeout-secs={self.exit_timeout_s}",
            f"--log-verbose={self.log_verbose}",
            "--strict-readiness=true",
        ]
        if backend_directory:
            cmd.append(f"--backend-directory={backend_directory}")
        if not auto_complete and not any("auto-complete" in a for a in self.extra_args):
            cmd.append("--disable-auto-complete-config")
        cmd += [f"--load-model={m}" for m in self.load_models]
        cmd += list(self.extra_args)
        return cmd


def needs_auto_complete(repository: Path) -> bool:
    """Whether a python-backend model of the repository relies on Triton completing its
    config: one without a config.pbtxt, or one whose model.py has `auto_complete_config`.
    Models pytest-triton writes never do, and on the python backend auto-completion costs
    each model load a stub of its own, started and finalized (--log-verbose=1 shows it).
    Only for servers with the python backend alone: other
    backends complete configs from the model file (inputs, max_batch_size)."""
    if not repository.is_dir():
        return True
    for model in repository.iterdir():
        if not model.is_dir() or model.name.startswith("."):
            continue
        if not (model / "config.pbtxt").is_file():
            return True
        for code in model.glob("*/model.py"):
            if "auto_complete_config" in code.read_text(errors="replace"):
                return True
    return False


def exit_description(launcher: str, code: int) -> str:
    """'tritonserver (local) exited with code -9 (killed by SIGKILL)'."""
    text = f"tritonserver ({launcher}) exited with code {code}"
    number = -code if code < 0 else code - 128 if code > 128 else 0
    if number:
        with contextlib.suppress(ValueError):
            text += f" (killed by {signal.Signals(number).name})"
    return text


class RunningServer(ABC):
    """A tritonserver this session can reach; stop() is idempotent and always safe.

    Servers this process started are watched: when one exits without being asked to, what is
    left of it is killed and `death` is set, so that every later request fails at once with
    that ServerError instead of waiting for a network timeout.
    """

    launcher: str = "?"
    endpoints: Endpoints
    backends: frozenset[str] = frozenset({"python"})
    gpu: bool = False
    model_control_mode: ModelControl = "explicit"
    repository_path: Path | None = None  # where the server reads models; None for external
    deployed: bool = False  # it serves its own models: nothing is uploaded or unloaded
    security: Security = PLAIN  # TLS files and request headers its clients use
    # Whether the server maps this machine's /dev/shm and its CUDA memory (shared memory
    # transports); None when that cannot be known here (an external server).
    host_memory: bool | None = None
    cuda_memory: bool | None = None
    death: ServerError | None = None
    stopping: bool = False

    @abstractmethod
    def log_text(self) -> str: ...

    @abstractmethod
    def exit_code(self) -> int | None:
        """None while running (or unknown, for an external server)."""

    @abstractmethod
    def stop(self) -> None: ...

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_excerpt(self.log_text(), lines)

    def raise_if_dead(self) -> None:
        """Free to call before every request: reads what the watcher found. Each call raises
        a new error (one instance raised again and again would pile up tracebacks)."""
        if self.death is not None:
            raise ServerError(self.death.headline, self.death.log_tail)

    def check_alive(self, wait_s: float = 0.0) -> None:
        """Ask the launcher whether the server exited, waiting up to `wait_s` for a dying one
        (after a connection error the process may not have been reaped yet)."""
        self.raise_if_dead()
        deadline = time.monotonic() + wait_s
        while True:
            if self.stopping:
                raise ServerError(
                    f"tritonserver ({self.launcher}) at {self.endpoints.http} was stopped by "
                    "pytest-triton (its fixture ended, or stop()/close() was called) before "
                    "this request was answered"
                )
            code = self.exit_code()
            if code is not None:
                self.record_death(code)
                self.raise_if_dead()
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def record_death(self, code: int) -> ServerError:
        if self.death is None:
            self.death = ServerError(exit_description(self.launcher, code), self.log_tail())
        return self.death

    # -- the watcher -------------------------------------------------------------------------
    def start_watcher(self) -> None:
        """Watch the server from now on; clients made for its addresses will ask it."""
        watched_servers.remember((self.endpoints.http, self.endpoints.grpc), self)
        threading.Thread(
            target=self._watch, name=f"tritonserver-{self.launcher}-watcher", daemon=True
        ).start()

    def _watch(self) -> None:
        code = self.wait_for_exit()
        if code is None or self.stopping:
            return
        self.died(code)

    def wait_for_exit(self) -> int | None:
        """Block until the server exits (its code), or None when that cannot be watched."""
        return None

    def died(self, code: int) -> None:
        """The server exited on its own: take down what is left of it, remember why."""
        self.record_death(code)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LiveServers:
    """Servers this process started and has not finished stopping; whatever is left is
    stopped at interpreter exit, so no failure path (an interrupted stop included) leaves a
    server or container behind."""

    def __init__(self) -> None:
        self._servers: set[RunningServer] = set()
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def add(self, server: RunningServer) -> None:
        with self._lock:
            self._servers.add(server)

    def discard(self, server: RunningServer) -> None:
        """Called once a stop has completed."""
        with self._lock:
            self._servers.discard(server)

    def started(self) -> frozenset[RunningServer]:
        """The servers live now (a session notes them when it begins)."""
        with self._lock:
            return frozenset(self._servers)

    def stop_all(self, keep: frozenset[RunningServer] = frozenset()) -> None:
        """Stop every live server but those in `keep`: a pytest session run inside another
        (pytester's in-process runs) stops its own servers, not its host session's."""
        with self._lock:
            servers = [s for s in self._servers if s not in keep]
        for server in servers:
            server.stop()


LIVE_SERVERS = LiveServers()


class Launcher(Protocol):
    """Starts a server for the given arguments and returns it ready, or raises ServerError."""

    name: str

    def start(self, args: ServerArgs) -> RunningServer: ...

    def target(self) -> ServerTarget:
        """What the server it starts will offer (decides native vs hosted, CPU vs GPU); known
        before the server starts, so test ids can be listed at collection."""
        ...


def free_ports(count: int = 3, host: str = "127.0.0.1") -> list[int]:
    """Ephemeral ports the kernel just handed out; a race remains: callers retry on EADDRINUSE."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


_FAILED_LOAD = re.compile(r"failed to load '([^']+)' version \d+: (.*?)(?:\"\s*$|$)", re.M)
_PORT_IN_USE = re.compile(r"already in use|failed to start (HTTP|GRPC|Metrics) service", re.I)


_ERROR_LINE = re.compile(r"^E\d{4} ")


def log_excerpt(log: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a server log, with its error lines kept even when they scrolled off,
    and tritonserver's usage text (printed after a bad flag) cut."""
    all_lines = log.splitlines()
    for i, line in enumerate(all_lines):
        if line.startswith("Usage: tritonserver"):
            all_lines = [*all_lines[:i], "(tritonserver usage text omitted)"]
            break
    tail = all_lines[-lines:]
    earlier_errors = [ln for ln in all_lines[:-lines] if _ERROR_LINE.match(ln)][-10:]
    if earlier_errors:
        tail = [*earlier_errors, "...", *tail]
    return "\n".join(tail)


def load_failures(log: str) -> list[tuple[str, str]]:
    """(model, first line of Triton's reason) for every model the log says failed to load."""
    found = []
    for model, reason in _FAILED_LOAD.findall(log):
        first = reason.encode().decode("unicode_escape", errors="replace").strip().splitlines()
        found.append((model, first[0] if first else reason))
    return found


def port_conflict(log: str) -> bool:
    return bool(_PORT_IN_USE.search(log))


def http_status(url: str, timeout: float = 1.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return None


def poll_until_ready(
    probe: Callable[[], str | None],
    timeout_s: float,
    timed_out: Callable[[str], BaseException],
    interval_s: float = 0.1,
) -> None:
    """The one readiness loop of every launcher: `probe()` answers None once the server is
    ready, else why it is not yet; it raises to stop at once (a server that died, a refusal),
    and `timed_out(why)` is raised when the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        why = probe()
        if why is None:
            return
        if time.monotonic() > deadline:
            raise timed_out(why)
        time.sleep(interval_s)


def wait_until_ready(server: RunningServer, timeout_s: float) -> None:
    """Poll /v2/health/ready; a dead server or a failed model load raises at once with the log."""
    ready_url = f"http://{server.endpoints.http}/v2/health/ready"

    def probe() -> str | None:
        code = server.exit_code()
        if code is not None:
            failures = load_failures(server.log_text())
            tail = server.log_tail()
            if failures:
                model, reason = failures[0]
                raise ModelLoadError(model, reason, tail)
            raise ServerError(
                f"{exit_description(server.launcher, code)} before it was ready", tail
            )
        return None if http_status(ready_url) == 200 else "not ready"

    def timed_out(_: str) -> BaseException:
        failures = load_failures(server.log_text())
        server_tail = server.log_tail()
        if failures:
            return ModelLoadError(failures[0][0], failures[0][1], server_tail)
        return ServerError(
            f"tritonserver ({server.launcher}) not ready after {timeout_s:.0f}s at "
            f"{ready_url}; raise --triton-startup-timeout if the models are large",
            server_tail,
        )

    poll_until_ready(probe, timeout_s, timed_out)
