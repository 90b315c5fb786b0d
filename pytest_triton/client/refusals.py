"""One request before anything else, and what its refusal means: a server or an ingress that
says no (HTTP 401/403, a TLS certificate that does not verify, a closed port) is told at once,
with the status or TLS reason, the URL as the user gave it, and the option that fixes it;
polling it for readiness, or sending a run's load to it, would only say so minutes later.

Every front end asks here: readiness of an external server, Locust's and triton-perf's
preflight before any user starts, triton-tune's before the first candidate.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from dataclasses import dataclass

from pytest_triton.base.errors import RefusedError
from pytest_triton.base.security import Security
from pytest_triton.client.wire.request import Protocol

PROBE_TIMEOUT_S = 5.0
READY_PATH = "/v2/health/ready"


@dataclass(frozen=True)
class Target:
    """Where a front end sends requests, and how the user named it."""

    given: str  # the URL as the user wrote it
    option: str  # the option that gave it: --triton-url, --host, --url
    protocol: Protocol
    hostport: str
    security: Security
    derived: bool = False  # the address was guessed (gRPC = HTTP port + 1), not given

    @property
    def shown(self) -> str:
        if self.derived:
            guess = "its HTTP port + 1" if self.protocol == "grpc" else "its gRPC port - 1"
            return (
                f"{self.hostport} (the {self.protocol.upper().replace('GRPC', 'gRPC')} address "
                f"guessed from {self.option} {self.given}: {guess})"
            )
        return f"{self.given} ({self.option})"

    @property
    def url_fix(self) -> str:
        if self.derived and self.protocol == "grpc":
            return "give the server's gRPC URL with --triton-grpc-url"
        if self.derived:
            return f"give the server's HTTP URL with {self.option}"
        return f"check {self.option}: is the server running there, on that port?"


@dataclass(frozen=True)
class Answer:
    """What one readiness request found: ready, or a refusal, or neither (not ready yet)."""

    ready: bool
    refusal: str | None = None  # the whole message, when refused
    problem: str = ""  # what was seen otherwise
    transient: bool = False  # a closed port: a server may be restarting


def _tls_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    return exc.reason or str(exc)


def tls_failure(target: Target, exc: ssl.SSLError) -> str:
    reason = _tls_reason(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        if "hostname" in reason.lower() or "ip address mismatch" in reason.lower():
            fix = (
                "give the name its certificate carries with --triton-tls-server-name, or "
                "use that name in the URL"
            )
        else:
            fix = (
                "give the CA bundle that signed the server's certificate with "
                "--triton-tls-ca (and --triton-tls-server-name where its name differs from "
                "the host)"
            )
        return f"TLS certificate verification failed for {target.shown}: {reason}; {fix}"
    if "WRONG_VERSION_NUMBER" in reason.upper() or "record layer" in reason.lower():
        return (
            f"TLS handshake with {target.shown} failed: {reason}; the server answers plain "
            f"{target.protocol}, not TLS: write {target.protocol}:// instead of "
            f"{target.protocol}s://"
        )
    if "CERTIFICATE_REQUIRED" in reason.upper() or "ALERT_CERTIFICATE" in reason.upper():
        return (
            f"TLS handshake with {target.shown} failed: {reason}; the server wants a client "
            "certificate: give it with --triton-tls-cert and --triton-tls-key"
        )
    return f"TLS handshake with {target.shown} failed: {reason}"


def status_refusal(target: Target, status: int, reason: str) -> str | None:
    """The message for an HTTP status that means no (None for any other status)."""
    said = f"HTTP {status} {reason}".rstrip()
    names = [name for name, _ in target.security.headers]
    if status in (401, 403):
        if names:
            fix = (
                f"the headers sent ({', '.join(names)}) were refused: check the value given "
                "with --triton-headers (its ${VARIABLE}s are read from the environment)"
            )
        else:
            fix = (
                "the server or an ingress in front of it wants credentials: give them with "
                "--triton-headers 'Authorization: Bearer ${TOKEN}'"
            )
        return f"{target.shown} refused the request: {said}; {fix}"
    return None


def _http(target: Target, timeout_s: float) -> Answer:
    host, port = target.hostport.rsplit(":", 1)
    security = target.security
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
    except ConnectionRefusedError:
        return _closed(target)
    except socket.gaierror as exc:
        return Answer(False, f"cannot resolve the host of {target.shown}: {exc}; {target.url_fix}")
    except OSError as exc:
        return Answer(False, problem=f"{type(exc).__name__}: {exc}")
    try:
        try:
            sock = security.wrap(sock, host.strip("[]"))
        except ssl.SSLError as exc:
            return Answer(False, tls_failure(target, exc))
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
        conn.sock = sock
        try:
            conn.request("GET", READY_PATH, headers=security.header_values())
            response = conn.getresponse()
            body = response.read(512).decode(errors="replace")
        except ssl.SSLError as exc:  # TLS 1.3: a missing client certificate shows here
            return Answer(False, tls_failure(target, exc))
        except (OSError, http.client.HTTPException) as exc:
            return Answer(False, problem=f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()
    finally:
        sock.close()
    if response.status == 200:
        return Answer(True)
    if response.status == 400 and "HTTPS port" in body and not security.tls:  # nginx's words
        return Answer(
            False,
            f"{target.shown} answers HTTP 400: it speaks TLS: write https:// instead of "
            "http:// (and give its CA bundle with --triton-tls-ca)",
        )
    refusal = status_refusal(target, response.status, response.reason)
    if refusal is not None:
        return Answer(False, refusal)
    return Answer(False, problem=f"it answers HTTP {response.status} {response.reason}")


def _closed(target: Target) -> Answer:
    return Answer(
        False,
        f"nothing accepts connections at {target.shown} (connection refused); {target.url_fix}",
        transient=True,
    )


def _grpc(target: Target, timeout_s: float) -> Answer:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    security = target.security
    options = (
        [("grpc.ssl_target_name_override", security.server_name)]
        if security.tls and security.server_name
        else None
    )
    client = grpcclient.InferenceServerClient(
        target.hostport,
        ssl=security.tls,
        root_certificates=security.ca_file if security.tls else None,
        private_key=security.key_file if security.tls else None,
        certificate_chain=security.cert_file if security.tls else None,
        channel_args=options,
    )
    try:
        ready = client.is_server_ready(
            headers=security.header_values() or None, client_timeout=timeout_s
        )
        return Answer(bool(ready), problem="" if ready else "it answers not ready")
    except InferenceServerException as exc:
        return _grpc_failure(target, str(exc.status()), exc.message() or str(exc))
    finally:
        client.close()


def _grpc_failure(target: Target, status: str, message: str) -> Answer:
    lowered = message.lower()
    if status.endswith(("UNAUTHENTICATED", "PERMISSION_DENIED")):
        refusal = status_refusal(target, 401 if "UNAUTH" in status else 403, "")
        return Answer(False, f"{refusal} (gRPC {status.rsplit('.', 1)[-1]}: {message})")
    if "certificate verify failed" in lowered or "certificate_verify_failed" in lowered:
        fix = (
            "give the CA bundle that signed the server's certificate with --triton-tls-ca "
            "(and --triton-tls-server-name where its name differs from the host)"
        )
        return Answer(
            False,
            f"TLS certificate verification failed for {target.shown}: {message}; {fix}",
        )
    if "ssl" in lowered or "handshake" in lowered:
        return Answer(False, f"TLS handshake with {target.shown} failed: {message}")
    if "connection refused" in lowered or "failed to connect" in lowered:
        return _closed(target)
    return Answer(False, problem=f"{status}: {message}")


def probe(target: Target, timeout_s: float = PROBE_TIMEOUT_S) -> Answer:
    """One readiness request to the target, over its protocol, TLS and headers."""
    if target.protocol == "grpc":
        return _grpc(target, timeout_s)
    return _http(target, timeout_s)


def raise_if_refused(target: Target, timeout_s: float = PROBE_TIMEOUT_S) -> Answer:
    """One request before any load: raise RefusedError when the target refuses it."""
    answer = probe(target, timeout_s)
    if answer.refusal is not None:
        raise RefusedError(answer.refusal)
    return answer
