"""External launcher: a tritonserver someone else runs (--triton-url), e.g. a staging server.

Nothing is started or stopped. Models are uploaded through Triton's load API (config and
files in the request), which needs the server in --model-control-mode=explicit; or, deployed
(--triton-deployed), the server's own models are checked and gated as they are served, in
any model control mode.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pytest_triton.base.errors import ConfigError, ServerError
from pytest_triton.base.security import PLAIN, Security
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.base.urls import Endpoints, endpoints_from
from pytest_triton.client.wire.request import Protocol
from pytest_triton.server.launcher import RunningServer, ServerArgs, wait_until_ready


class ExternalServer(RunningServer):
    launcher = "external"

    def __init__(
        self, endpoints: Endpoints, backends: Iterable[str], deployed: bool, security: Security
    ) -> None:
        self.endpoints = endpoints
        self.backends = frozenset(backends)
        self.repository_path = None
        self.deployed = deployed
        self.security = security

    def log_text(self) -> str:
        return f"(external server at {self.endpoints.http}: its log is not available here)"

    def exit_code(self) -> int | None:
        return None

    def stop(self) -> None:
        """Not ours to stop."""


class ExternalLauncher:
    name = "external"

    def __init__(
        self,
        url: str,
        grpc_url: str | None = None,
        backends: Iterable[str] = ("python",),
        *,
        gpu: bool = False,
        numerics: str = "strict",
        deployed: bool = False,
        security: Security = PLAIN,
        name_suffix: str = "",
    ) -> None:
        self.endpoints = endpoints_from(url, grpc_url)
        self.name_suffix = "" if deployed else name_suffix
        self._backends = frozenset(backends)
        self.gpu = gpu
        self.deployed = deployed
        self.security = security
        self.numerics = numerics  # its environment is not ours: strict needs the server's
        # owner to set NVIDIA_TF32_OVERRIDE=0 there (docs/gpu.md)

    def target(self) -> ServerTarget:
        # Without --triton-gpu its device is unknown here: KIND_AUTO lets Triton place
        # instances on a GPU if any. Its python environment cannot be inspected from here: a
        # hosted model that cannot reach the GPU fails to load and says why.
        return ServerTarget(
            backends=self._backends,
            instance_kind="KIND_GPU" if self.gpu else "KIND_AUTO",
            tensorrt_problem=None
            if "tensorrt" in self._backends
            else "the external server was not declared with the tensorrt backend "
            "(--triton-backends)",
            numerics=self.numerics,
            deployed=self.deployed,
            name_suffix=self.name_suffix,
        )

    def start(self, args: ServerArgs) -> ExternalServer:
        server = ExternalServer(self.endpoints, self._backends, self.deployed, self.security)
        if self.security.plain:
            wait_until_ready(server, args.startup_timeout_s)
        else:
            wait_until_serving(server, args.startup_timeout_s)
        return server


def wait_until_serving(server: ExternalServer, timeout_s: float) -> None:
    """Readiness through a client with the server's TLS and headers (an ingress in front
    wants them); a TLS handshake that fails is a configuration error, said at once."""
    from pytest_triton.client.triton_client import TritonClient

    protocol: Protocol = "http" if "grpc" not in server.endpoints.tls else "grpc"
    url = server.endpoints.url(protocol)
    security = server.security.for_protocol(protocol in server.endpoints.tls)
    deadline = time.monotonic() + timeout_s
    with TritonClient(url, protocol, timeout_s=min(timeout_s, 10.0), security=security) as client:
        while True:
            try:
                if client.is_server_ready():
                    return
                problem = "it answers not ready"
            except Exception as exc:
                problem = str(exc).splitlines()[0] if str(exc) else repr(exc)
                if "CERTIFICATE" in problem.upper() or "SSL" in problem.upper():
                    raise ConfigError(
                        f"TLS with the server at {protocol}s://{url} failed: {problem} (give the "
                        "CA bundle that signed its certificate with --triton-tls-ca, and its "
                        "name with --triton-tls-server-name where it differs from the host)"
                    ) from None
            if time.monotonic() > deadline:
                raise ServerError(
                    f"the server at {url} ({protocol}) is not ready after {timeout_s:.0f}s: "
                    f"{problem}"
                )
            time.sleep(0.2)
