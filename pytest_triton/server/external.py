"""External launcher: a tritonserver someone else runs (--triton-url), e.g. a staging server.

Nothing is started or stopped. Models are uploaded through Triton's load API (config and
files in the request), which needs the server in --model-control-mode=explicit; or, deployed
(--triton-deployed), the server's own models are checked and gated as they are served, in
any model control mode.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pytest_triton.base.config import Numerics
from pytest_triton.base.errors import RefusedError, ServerError
from pytest_triton.base.security import PLAIN, Security
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.base.urls import Endpoints, endpoints_from
from pytest_triton.client import refusals
from pytest_triton.client.wire.request import Protocol
from pytest_triton.server.launcher import RunningServer, ServerArgs, poll_until_ready


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
        numerics: Numerics = "strict",
        deployed: bool = False,
        security: Security = PLAIN,
        name_suffix: str = "",
        url_option: str = "--triton-url",
    ) -> None:
        self.url, self.url_option = url, url_option
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
        wait_until_serving(server, args.startup_timeout_s, self.url, self.url_option)
        return server


REFUSED_GRACE_S = 3.0  # a closed port may be a server restarting: how long it may stay closed


def wait_until_serving(
    server: ExternalServer, timeout_s: float, given: str = "", option: str = "--triton-url"
) -> None:
    """Readiness with the server's TLS and headers (an ingress in front wants them). A refusal
    (HTTP 401/403, a certificate that does not verify, a port that stays closed) is a
    configuration error, said at once with the option that fixes it, not after the timeout."""
    protocol: Protocol = "http" if "grpc" not in server.endpoints.tls else "grpc"
    hostport = server.endpoints.url(protocol)
    security = server.security.for_protocol(protocol in server.endpoints.tls)
    scheme = f"{protocol}s" if protocol in server.endpoints.tls else protocol
    target = refusals.Target(
        given or f"{scheme}://{hostport}", option, protocol, hostport, security
    )
    started = time.monotonic()

    def probe() -> str | None:
        answer = refusals.probe(target, min(timeout_s, refusals.PROBE_TIMEOUT_S))
        if answer.ready:
            return None
        if answer.refusal is not None:
            if not answer.transient or time.monotonic() - started > REFUSED_GRACE_S:
                raise RefusedError(answer.refusal)
            return answer.refusal
        return answer.problem

    def timed_out(problem: str) -> BaseException:
        return ServerError(
            f"the server at {target.shown} is not ready after {timeout_s:.0f}s: "
            f"{problem}; raise --triton-startup-timeout if its models are large"
        )

    poll_until_ready(probe, timeout_s, timed_out, interval_s=0.2)
