"""External launcher: a tritonserver someone else runs (--triton-url), e.g. a staging server.

Nothing is started or stopped. Models are uploaded through Triton's load API (config and
files in the request), which needs the server in --model-control-mode=explicit.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..repository.variants import ServerTarget
from .base import Endpoints, RunningServer, ServerArgs, wait_until_ready


def parse_url(url: str, default_scheme: str = "http") -> tuple[str, str]:
    """(scheme, host:port) from 'http://h:p', 'grpc://h:p' or 'h:p'."""
    text = url if "://" in url else f"{default_scheme}://{url}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "grpc") or not parts.hostname or parts.port is None:
        raise ConfigError(
            f"Triton URL {url!r} is not of the form http://HOST:PORT or grpc://HOST:PORT "
            "(e.g. http://127.0.0.1:8000)"
        )
    return parts.scheme, f"{parts.hostname}:{parts.port}"


def endpoints_from(url: str, grpc_url: str | None = None) -> Endpoints:
    """Endpoints of a server given one URL; the other protocol defaults to Triton's port pair
    (gRPC = HTTP port + 1, as 8000/8001)."""
    scheme, hostport = parse_url(url)
    host, port = hostport.rsplit(":", 1)
    if scheme == "http":
        http = hostport
        grpc = parse_url(grpc_url, "grpc")[1] if grpc_url else f"{host}:{int(port) + 1}"
    else:
        grpc = hostport
        http = f"{host}:{int(port) - 1}"
    return Endpoints(http, grpc)


class ExternalServer(RunningServer):
    launcher = "external"

    def __init__(self, endpoints: Endpoints, backends: Iterable[str]) -> None:
        self.endpoints = endpoints
        self.backends = frozenset(backends)
        self.repository_path = None

    def log_text(self) -> str:
        return f"(external server at {self.endpoints.http}: its log is not available here)"

    def exit_code(self) -> int | None:
        return None

    def stop(self) -> None:
        """Not ours to stop."""


class ExternalLauncher:
    name = "external"

    def __init__(self, url: str, grpc_url: str | None = None,
                 backends: Iterable[str] = ("python",)) -> None:
        self.endpoints = endpoints_from(url, grpc_url)
        self._backends = frozenset(backends)

    def target(self) -> ServerTarget:
        # Its device is unknown here: KIND_AUTO lets Triton place instances on a GPU if any.
        return ServerTarget(backends=self._backends, instance_kind="KIND_AUTO",
                            tensorrt_problem=None if "tensorrt" in self._backends else
                            "the external server was not declared with the tensorrt backend "
                            "(--triton-backends)")

    def start(self, args: ServerArgs) -> ExternalServer:
        server = ExternalServer(self.endpoints, self._backends)
        wait_until_ready(server, args.startup_timeout_s)
        return server
