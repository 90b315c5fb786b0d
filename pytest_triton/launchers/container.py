"""Container launcher: tritonserver in Docker through testcontainers (`testcontainers.core`).

The repository is mounted read-only at /models, ports are published on 127.0.0.1 with
ephemeral host ports read back from Docker, readiness is an HTTP wait on /v2/health/ready
that gives up at once when the container dies, and the container is removed on every exit
path. Ryuk (testcontainers' reaper) cannot be pulled on offline machines, so unless
TESTCONTAINERS_RYUK_DISABLED is set explicitly this launcher disables it and reaps instead:
each container is labelled with its owner's pid, and containers of dead owners are removed
when the next launcher starts.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import TritonConfig
from ..errors import ConfigError, ModelLoadError, ServerError
from ..repository.variants import ServerTarget
from .base import (
    LIVE_SERVERS,
    Endpoints,
    RunningServer,
    ServerArgs,
    load_failures,
    log_excerpt,
    process_alive,
)

NGC_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
"""Triton 2.51.0, the release the local launcher's bundled server is built from."""
CPU_IMAGE = "pytest-triton-cpu:latest"
NGC_BACKENDS = frozenset({"python", "onnxruntime", "pytorch", "tensorrt"})
CPU_IMAGE_BACKENDS = frozenset({"python"})
OWNER_LABEL = "org.pytest-triton.owner-pid"
REPOSITORY_MOUNT = "/models"
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
# The seeds' `docker run` flags: --shm-size=1g --ulimit memlock=-1 --ulimit stack=67108864
SHM_SIZE = "1g"
STACK_BYTES = 67108864



def _use_own_reaper() -> None:
    if "TESTCONTAINERS_RYUK_DISABLED" not in os.environ:
        from testcontainers.core.config import testcontainers_config

        testcontainers_config.ryuk_disabled = True


@dataclass(frozen=True)
class ContainerSettings:
    """Everything `docker run` gets besides the command: the part a GPU host changes."""

    image: str
    gpus: str | None = None  # None: no GPU; "all" or "0,1"
    backends: frozenset[str] = CPU_IMAGE_BACKENDS
    shm_size: str = SHM_SIZE
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: TritonConfig) -> ContainerSettings:
        image = config.image or (NGC_IMAGE if config.gpu else CPU_IMAGE)
        if config.backends:
            backends = frozenset(config.backends)
        elif image.startswith("nvcr.io/nvidia/tritonserver:"):
            backends = NGC_BACKENDS
        else:
            backends = CPU_IMAGE_BACKENDS
        return cls(image=image, gpus=config.gpus if config.gpu else None, backends=backends)

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

        kwargs: dict[str, Any] = {
            "shm_size": self.shm_size,
            "labels": {OWNER_LABEL: str(os.getpid()), **self.labels},
        }
        if self.gpus is not None:
            # The seeds' GPU flags. Unlimited memlock lets CUDA pin host memory; an unprivileged
            # CPU container may not raise it (runc: "error setting rlimit type 8"), and the
            # python backend does not need it, so CPU containers keep Docker's defaults.
            kwargs["ulimits"] = [Ulimit(name="memlock", soft=-1, hard=-1),
                                 Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES)]
            kwargs["device_requests"] = self.device_requests()
        return kwargs


def command(args: ServerArgs) -> list[str]:
    """The server command inside the container: fixed ports, all interfaces of its netns."""
    return args.command("tritonserver", repository=REPOSITORY_MOUNT, http_port=PORTS["http"],
                        grpc_port=PORTS["grpc"], metrics_port=PORTS["metrics"],
                        address="0.0.0.0")


def _loopback_container(image: str) -> Any:
    """A DockerContainer whose ports are published on 127.0.0.1 only, with ephemeral host
    ports, and reached there: testcontainers' own host lookup answers the Docker gateway when
    it runs inside a container, where nothing is published."""
    from testcontainers.core.container import DockerContainer

    class LoopbackContainer(DockerContainer):
        def get_container_host_ip(self) -> str:
            return "127.0.0.1"

        def get_exposed_port(self, port: int) -> int:
            return int(self.get_docker_client().port(self.get_container_id(), port))

    container = LoopbackContainer(image)
    for port in PORTS.values():
        container.ports[f"{port}/tcp"] = ("127.0.0.1", None)  # type: ignore[assignment]
    return container


class ContainerServer(RunningServer):
    launcher = "container"

    def __init__(self, settings: ContainerSettings, args: ServerArgs) -> None:
        self.settings = settings
        self.backends = settings.backends
        self.gpu = settings.gpus is not None
        self.model_control_mode = args.model_control_mode
        self.repository_path = args.model_repository
        self.command = command(args)
        self._final_log: str | None = None  # set once stopped
        self._stop_lock = threading.RLock()
        container = _loopback_container(settings.image).with_command(self.command)
        container.with_volume_mapping(str(args.model_repository), REPOSITORY_MOUNT, "ro")
        container.with_kwargs(**settings.run_kwargs())
        self.container = container
        self.endpoints = Endpoints("", "")

    def start(self, timeout_s: float) -> None:
        LIVE_SERVERS.add(self)
        self.container.start()
        try:
            mapped = {name: self.container.get_exposed_port(port) for name, port in PORTS.items()}
        except Exception:
            code = self.exit_code()  # a container that died at once has no port mappings
            if code is not None:
                raise self._exited(code) from None
            raise
        self.endpoints = Endpoints(f"127.0.0.1:{mapped['http']}", f"127.0.0.1:{mapped['grpc']}",
                                   f"127.0.0.1:{mapped['metrics']}")
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        """testcontainers' HTTP wait on /v2/health/ready, in short rounds so that a container
        that died is reported at once (with its log) instead of after the whole timeout."""
        from testcontainers.core.wait_strategies import HttpWaitStrategy

        deadline = time.monotonic() + timeout_s
        while True:
            code = self.exit_code()
            if code is not None:
                raise self._exited(code)
            probe = (HttpWaitStrategy(PORTS["http"], "/v2/health/ready").for_status_code(200)
                     .with_startup_timeout(1).with_poll_interval(0.1))
            try:
                probe.wait_until_ready(self.container)
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"tritonserver container ({self.settings.image}) not ready after "
                        f"{timeout_s:.0f}s; raise --triton-startup-timeout if the models are "
                        "large", self.log_tail()) from None

    def _exited(self, code: int) -> ServerError:
        log = self.log_text()
        failures = load_failures(log)
        if failures:
            return ModelLoadError(failures[0][0], failures[0][1], log_excerpt(log))
        return ServerError(f"tritonserver container ({self.settings.image}) exited with code "
                           f"{code} before it was ready", log_excerpt(log))

    def log_text(self) -> str:
        if self._final_log is not None:
            return self._final_log
        try:
            raw = self.container.get_wrapped_container().logs(stdout=True, stderr=True)
        except Exception:  # no container (create failed) or the engine went away
            return ""
        return bytes(raw).decode(errors="replace")

    def exit_code(self) -> int | None:
        try:
            wrapped = self.container.get_wrapped_container()
            wrapped.reload()
        except Exception:
            return None
        if wrapped.status in ("exited", "dead"):
            return int(wrapped.attrs.get("State", {}).get("ExitCode", -1))
        return None

    def stop(self) -> None:
        """Remove the container (force), keeping its log readable; idempotent."""
        with self._stop_lock:
            if self._final_log is None:
                log = self.log_text()
                with contextlib.suppress(Exception):  # already gone, or never created
                    self.container.stop(force=True, delete_volume=True)
                self._final_log = log
            LIVE_SERVERS.discard(self)


class ContainerLauncher:
    name = "container"

    def __init__(self, settings: ContainerSettings) -> None:
        self.settings = settings

    @classmethod
    def from_config(cls, config: TritonConfig) -> ContainerLauncher:
        return cls(ContainerSettings.from_config(config))

    def target(self) -> ServerTarget:
        return ServerTarget(backends=self.settings.backends,
                            instance_kind="KIND_GPU" if self.settings.gpus else "KIND_CPU",
                            tensorrt_problem=tensorrt_problem(self.settings))

    def start(self, args: ServerArgs) -> ContainerServer:
        client = docker_client()
        ensure_image(client, self.settings.image)
        reap_orphans(client)
        _use_own_reaper()
        server = ContainerServer(self.settings, args)
        try:
            server.start(args.startup_timeout_s)
        except ServerError:
            server.stop()
            raise
        except BaseException as exc:
            log = server.log_tail()
            server.stop()
            if isinstance(exc, Exception):
                raise ServerError(f"starting container {self.settings.image} failed: "
                                  f"{type(exc).__name__}: {exc}", log) from exc
            raise
        return server


def tensorrt_problem(settings: ContainerSettings) -> str | None:
    """Why TensorRT plans cannot be served by this container, or None."""
    if settings.gpus is None:
        return "TensorRT plans need a GPU server with the tensorrt backend: run with --triton-gpu"
    if "tensorrt" not in settings.backends:
        return f"{settings.image} was not declared with the tensorrt backend (--triton-backends)"
    from . import tensorrt

    return tensorrt.plan_problem(settings.image, tensorrt.local_version(),
                                 tensorrt.image_version(settings.image))


def ensure_image(client: Any, image: str) -> None:
    """The image is here, or pulled now; otherwise say how to get it."""
    import docker.errors

    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    if image.split(":")[0] == CPU_IMAGE.split(":")[0]:
        raise ConfigError(
            f"image {image} not found: build it with docker/build-cpu-image (in a pytest-triton "
            "checkout; offline, 3 minutes) or pass --triton-image")
    try:
        client.images.pull(image)
    except Exception as exc:
        raise ConfigError(
            f"image {image} is not on this machine and could not be pulled ({exc}); `docker "
            "pull` it first (NGC images need `docker login nvcr.io`) or pass --triton-image"
        ) from None


def docker_client() -> Any:
    try:
        import docker
    except ImportError:
        raise ConfigError("the container launcher needs the Docker SDK and testcontainers: "
                          "pip install 'pytest-triton[container]'") from None
    try:
        client = docker.from_env()  # type: ignore[attr-defined]
        client.ping()
    except Exception as exc:
        raise ConfigError(f"no Docker engine answers ({type(exc).__name__}: {exc}); start it "
                          "(e.g. `sudo systemctl start docker`, or .ci/docker-engine in a "
                          "pytest-triton checkout) and check that `docker info` works, or run "
                          "without containers (--triton-launcher local, no --triton-gpu)"
                          ) from None
    return client


def reap_orphans(client: Any) -> list[str]:
    """Remove containers this launcher started for processes that no longer exist."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        pid = int(container.labels.get(OWNER_LABEL, "0"))
        if pid and not process_alive(pid):
            container.remove(force=True)
            removed.append(container.short_id)
    return removed


