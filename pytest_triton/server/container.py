"""Container launcher: tritonserver in Docker through testcontainers (`testcontainers.core`).

The repository is mounted read-only at /models, ports are published on 127.0.0.1 with
ephemeral host ports read back from Docker, readiness is a testcontainers wait strategy on
/v2/health/ready that gives up at once when the container dies, and the container is removed
on every exit path. Each container is labelled with its owner's pid; containers of dead
owners are removed when the next launcher starts.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from testcontainers.core.container import DockerContainer
from testcontainers.core.wait_strategies import ContainerStatusWaitStrategy
from testcontainers.core.waiting_utils import WaitStrategy, WaitStrategyTarget

from pytest_triton.base.config import Numerics, TritonConfig
from pytest_triton.base.errors import ModelLoadError, ServerError
from pytest_triton.base.processes import interrupts_deferred
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.base.urls import Endpoints
from pytest_triton.server import tensorrt
from pytest_triton.server.docker_engine import (
    CPU_IMAGE,
    OWNER_LABEL,
    docker_client,
    ensure_image,
    ensure_reaper,
    owner_labels,
    reap_orphan_containers,
)
from pytest_triton.server.launcher import (
    LIVE_SERVERS,
    RunningServer,
    ServerArgs,
    http_status,
    load_failures,
    log_excerpt,
    poll_until_ready,
)

NGC_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
"""Triton 2.51.0, the release the local launcher's bundled server is built from."""
NGC_BACKENDS = frozenset({"python", "onnxruntime", "pytorch", "tensorrt"})
CPU_IMAGE_BACKENDS = frozenset({"python"})
REPOSITORY_MOUNT = "/models"
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
# The examples' `docker run` flags: --shm-size=1g --ulimit memlock=-1 --ulimit stack=67108864
SHM_SIZE = "1g"
HOST_SHM = "/dev/shm"  # mounted over the container's own: the system shared memory transport
STACK_BYTES = 67108864
_CONTAINER_NUMBERS = itertools.count()

__all__ = [
    "CPU_IMAGE",
    "NGC_BACKENDS",
    "NGC_IMAGE",
    "OWNER_LABEL",
    "ContainerLauncher",
    "ContainerServer",
    "ContainerSettings",
    "command",
    "docker_client",
    "reap_orphan_containers",
]


@dataclass(frozen=True)
class ContainerSettings:
    """Everything `docker run` gets besides the command: the part a GPU host changes."""

    image: str
    gpus: str | None = None  # None: no GPU; "all" or "0,1"
    backends: frozenset[str] = CPU_IMAGE_BACKENDS
    shm_size: str = SHM_SIZE
    labels: dict[str, str] = field(default_factory=dict)
    numerics: Numerics = "strict"
    # Mount this machine's /dev/shm, so that system shared memory works as with a local
    # server: on for every container pytest-triton starts (its python backend's own regions
    # get a per-container prefix and are removed at stop).
    host_shm: bool = True

    @classmethod
    def from_config(cls, config: TritonConfig) -> ContainerSettings:
        image = config.server.image or (NGC_IMAGE if config.server.gpu else CPU_IMAGE)
        if config.server.backends:
            backends = frozenset(config.server.backends)
        elif image.startswith("nvcr.io/nvidia/tritonserver:"):
            backends = NGC_BACKENDS
        else:
            backends = CPU_IMAGE_BACKENDS
        return cls(
            image=image,
            gpus=config.server.gpus if config.server.gpu else None,
            backends=backends,
            numerics=config.server.numerics,
        )

    @property
    def environment(self) -> dict[str, str]:
        """Strict numerics: no TF32 in cuBLAS/cuDNN of any backend in the container."""
        return {"NVIDIA_TF32_OVERRIDE": "0"} if self.numerics == "strict" else {}

    def device_requests(self) -> list[Any]:
        if self.gpus is None:
            return []
        from docker.types import DeviceRequest

        if self.gpus == "all":
            return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        ids = [g.strip() for g in self.gpus.split(",") if g.strip()]
        return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]

    def run_kwargs(self) -> dict[str, Any]:
        """docker-py `containers.create` keyword arguments."""
        from docker.types import Ulimit

        # init: Docker's tini is PID 1 and tritonserver its child, which gets signals like
        # any process (the kernel drops signals sent to a PID 1 that has no handler for them,
        # so a SIGSEGV sent to a bare tritonserver did nothing); tini reaps the python stubs
        # and exits with 128 + the signal that killed the server, which names the signal.
        kwargs: dict[str, Any] = {"init": True, "labels": {**owner_labels(), **self.labels}}
        if not self.host_shm:  # else /dev/shm is the host's, mounted over the container's
            kwargs["shm_size"] = self.shm_size
        if self.gpus is not None:
            # The examples' GPU flags. Unlimited memlock lets CUDA pin host memory; an unprivileged
            # CPU container may not raise it (runc: "error setting rlimit type 8"), and the
            # python backend does not need it, so CPU containers keep Docker's defaults.
            kwargs["ulimits"] = [
                Ulimit(name="memlock", soft=-1, hard=-1),
                Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES),
            ]
            kwargs["device_requests"] = self.device_requests()
        return kwargs


def command(args: ServerArgs) -> list[str]:
    """The server command inside the container: fixed ports, all interfaces of its netns."""
    return args.command(
        "tritonserver",
        repository=REPOSITORY_MOUNT,
        http_port=PORTS["http"],
        grpc_port=PORTS["grpc"],
        metrics_port=PORTS["metrics"],
        address="0.0.0.0",
    )


class LoopbackContainer(DockerContainer):
    """A DockerContainer whose ports are published on 127.0.0.1 only, on ephemeral host ports,
    and reached there. testcontainers' own host lookup answers the Docker gateway when it runs
    inside a container (as CI does), where nothing published on loopback can be reached."""

    def with_loopback_ports(self, *ports: int) -> LoopbackContainer:
        # docker-py's documented binding form (host IP, host port); testcontainers' own
        # with_bind_ports binds every interface.
        bindings = cast(dict[str, Any], self.ports)
        for port in ports:
            bindings[f"{port}/tcp"] = ("127.0.0.1", None)
        return self

    def get_container_host_ip(self) -> str:
        return "127.0.0.1"

    def get_exposed_port(self, port: int) -> int:
        ContainerStatusWaitStrategy().wait_until_ready(self)
        return int(self.get_docker_client().port(self.get_container_id(), port))


class TritonReady(WaitStrategy):
    """GET /v2/health/ready answers 200; a container that exits fails at once, with its log,
    instead of after the whole startup timeout."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self.with_startup_timeout(int(timeout_s)).with_poll_interval(0.1)

    def wait_until_ready(self, container: WaitStrategyTarget) -> None:
        url: str | None = None

        def probe() -> str | None:
            nonlocal url
            wrapped = container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                raise ContainerExited(int(wrapped.attrs.get("State", {}).get("ExitCode", -1)))
            if wrapped.status != "running":
                return f"the container is {wrapped.status}"
            if url is None:
                try:
                    port = container.get_exposed_port(PORTS["http"])
                except (TimeoutError, ConnectionError):  # it stopped since: next round says
                    return "its port is not published yet"
                url = f"http://{container.get_container_host_ip()}:{port}/v2/health/ready"
            return None if http_status(url) == 200 else "not ready"

        poll_until_ready(
            probe,
            self._startup_timeout,
            lambda _: TimeoutError(
                f"{url or 'the container'} not ready after {self._startup_timeout:.0f}s"
            ),
            self._poll_interval,
        )


class ContainerExited(ServerError):
    """The container stopped before it was ready."""

    def __init__(self, code: int) -> None:
        super().__init__(f"exited with code {code}")
        self.code = code


class ContainerServer(RunningServer):
    launcher = "container"

    def __init__(self, settings: ContainerSettings, args: ServerArgs) -> None:
        self.settings = settings
        self.backends = settings.backends
        self.gpu = settings.gpus is not None
        self.host_memory = settings.host_shm
        self.cuda_memory = None if self.gpu else False
        self.model_control_mode = args.model_control_mode
        self.repository_path = args.model_repository
        self.command = command(args)
        # With the host's /dev/shm mounted, the python backend's own regions land there: a
        # prefix with our pid lets stop() (or the next run, if we are killed) remove them.
        self.shm_prefix = f"pytest_triton_{os.getpid()}_k{next(_CONTAINER_NUMBERS)}_"
        if settings.host_shm and "python" in settings.backends:
            self.command.append(f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}")
        self._final_log: str | None = None  # set once stopped
        self._stop_lock = threading.RLock()
        self.container = (
            LoopbackContainer(settings.image)
            .with_loopback_ports(*PORTS.values())
            .with_command(self.command)
            .with_volume_mapping(str(args.model_repository), REPOSITORY_MOUNT, "ro")
            .with_kwargs(**settings.run_kwargs())
            .with_envs(**settings.environment)
            .waiting_for(TritonReady(args.startup_timeout_s))
        )
        if settings.host_shm:
            self.container.with_volume_mapping(HOST_SHM, HOST_SHM, "rw")
        self.endpoints = Endpoints("", "")

    def start(self) -> None:
        LIVE_SERVERS.add(self)
        try:
            self.container.start()
        except ContainerExited as exc:
            raise self._exited(exc.code) from None
        except TimeoutError as exc:
            raise ServerError(
                f"tritonserver container ({self.settings.image}) not ready: {exc}; raise "
                "--triton-startup-timeout if the models are large",
                self.log_tail(),
            ) from None
        mapped = {name: self.container.get_exposed_port(port) for name, port in PORTS.items()}
        self.endpoints = Endpoints(
            f"127.0.0.1:{mapped['http']}",
            f"127.0.0.1:{mapped['grpc']}",
            f"127.0.0.1:{mapped['metrics']}",
        )
        self.start_watcher()

    def wait_for_exit(self) -> int | None:
        """Docker's wait, in rounds (its HTTP call has a timeout); None once we stop it or the
        engine goes away."""
        wrapped = self.container.get_wrapped_container()
        while not self.stopping:
            try:
                return int(wrapped.wait(timeout=5).get("StatusCode", -1))
            except Exception:  # a round timed out, or the container is gone
                try:
                    wrapped.reload()
                except Exception:
                    return None
                if wrapped.status in ("exited", "dead"):
                    return int(wrapped.attrs.get("State", {}).get("ExitCode", -1))
        return None

    def _exited(self, code: int) -> ServerError:
        log = self.log_text()
        failures = load_failures(log)
        if failures:
            return ModelLoadError(failures[0][0], failures[0][1], log_excerpt(log))
        return ServerError(
            f"tritonserver container ({self.settings.image}) exited with code "
            f"{code} before it was ready",
            log_excerpt(log),
        )

    def log_text(self) -> str:
        if self._final_log is not None:
            return self._final_log
        try:
            stdout, stderr = self.container.get_logs()
        except Exception:  # no container (create failed) or the engine went away
            return ""
        return (stdout + stderr).decode(errors="replace")

    def exit_code(self) -> int | None:
        try:
            self.container.reload()
            wrapped = self.container.get_wrapped_container()
        except Exception:
            return None
        if wrapped.status in ("exited", "dead"):
            return int(wrapped.attrs.get("State", {}).get("ExitCode", -1))
        return None

    def stop(self) -> None:
        """Remove the container (force), keeping its log readable; idempotent."""
        self.stopping = True
        with self._stop_lock:
            if self._final_log is None:
                log = self.log_text()
                with interrupts_deferred():  # a Ctrl-C here would leave regions behind
                    with contextlib.suppress(Exception):  # already gone, or never created
                        self.container.stop(force=True, delete_volume=True)
                    if self.settings.host_shm:
                        for region in Path(HOST_SHM).glob(f"{self.shm_prefix}*"):
                            with contextlib.suppress(OSError):
                                region.unlink()
                    self._final_log = log
            LIVE_SERVERS.discard(self)


class ContainerLauncher:
    name = "container"

    def __init__(self, settings: ContainerSettings) -> None:
        self.settings = settings
        self._target: ServerTarget | None = None

    @classmethod
    def from_config(cls, config: TritonConfig) -> ContainerLauncher:
        return cls(ContainerSettings.from_config(config))

    def target(self) -> ServerTarget:
        if self._target is None:  # the TensorRT check runs the image: ask once
            self._target = ServerTarget(
                backends=self.settings.backends,
                instance_kind="KIND_GPU" if self.settings.gpus else "KIND_CPU",
                tensorrt_problem=tensorrt_problem(self.settings),
                numerics=self.settings.numerics,
            )
        return self._target

    def start(self, args: ServerArgs) -> ContainerServer:
        client = docker_client()
        ensure_image(client, self.settings.image)
        ensure_reaper(client)
        reap_orphan_containers(client)
        server = ContainerServer(self.settings, args)
        try:
            server.start()
        except ServerError:
            server.stop()
            raise
        except BaseException as exc:
            log = server.log_tail()
            server.stop()
            if isinstance(exc, Exception):
                raise ServerError(
                    f"starting container {self.settings.image} failed: {type(exc).__name__}: {exc}",
                    log,
                ) from exc
            raise
        return server


def tensorrt_problem(settings: ContainerSettings) -> str | None:
    """Why TensorRT plans cannot be served by this container, or None."""
    if settings.gpus is None:
        return "TensorRT plans need a GPU server with the tensorrt backend: run with --triton-gpu"
    if "tensorrt" not in settings.backends:
        return f"{settings.image} was not declared with the tensorrt backend (--triton-backends)"
    return tensorrt.plan_problem(
        settings.image, tensorrt.local_version(), tensorrt.image_version(settings.image)
    )
