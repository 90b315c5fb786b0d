"""What a failed request says: every way a request to Triton can fail, as an error naming the
model, the protocol, the server and the problem.

- the server answered with a rejection: InferenceError with Triton's own message, plus what
  Triton leaves out (the versions a model has, an empty input that caused a size mismatch);
- the connection failed (refused, lost mid-request, timed out): the ServerError of a server
  that died, when the client knows its server, else an InferenceError naming the address;
- a name or version Triton can never serve: refused before sending (over HTTP Triton answers
  those with a bare 'Not Found', and over gRPC it reads version '1.5' as version 1).
"""

from __future__ import annotations

import http.client
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from tritonclient.utils import InferenceServerException

from pytest_triton.base.errors import InferenceError, RefusedError, ServerError
from pytest_triton.base.watched_servers import ServerHealth

SERVER_DOWN_WAIT_S = 2.0  # after a transport failure: how long the server may take to be reaped
MAX_VERSION = 2**63 - 1  # Triton parses versions as int64
_VERSION = re.compile(r"[1-9][0-9]*")
_LOST = (
    "connection closed",
    "socket closed",
    "stream removed",
    "connection reset",
    "broken pipe",
    "end of file",
    "connection aborted",
)
_VERSION_MISSING = re.compile(
    r"version \S+ is not found|requested model version is not "
    r"available",
    re.I,
)
_SIZE_MISMATCH = "byte size mismatch"
_REQUEST_ID = re.compile(r"^\[request id: [^\]]*\] ")
_UNKNOWN_MODEL = re.compile(r"unknown model: '.*' is not found$")
# --grpc-restricted-protocol / --http-restricted-api refusing a call without its header
# (over gRPC as UNAVAILABLE, which is no transport failure)
_RESTRICTED = re.compile(r"is restricted, expecting header '([^']+)'")
Shapes = Mapping[str, Sequence[int]]


class RequestSource(Protocol):
    """The client a request went out from."""

    @property
    def url(self) -> str: ...

    @property
    def protocol(self) -> str: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def server(self) -> ServerHealth | None: ...


def request_problem(model: str, version: str) -> str | None:
    """Why Triton can never serve this model name or version, or None."""
    if not model:
        return "the model name is empty"
    if "/" in model or "\\" in model or model in (".", ".."):
        return (
            f"{model!r} cannot be a Triton model name: a model is one directory of the "
            "model repository (no '/', not '.' or '..')"
        )
    if version and not (_VERSION.fullmatch(version) and int(version) <= MAX_VERSION):
        return (
            f"version {version!r} of model {model!r} is not a version number: Triton "
            "model versions are positive integers ('1', '2', ...), and '' asks for the "
            "latest"
        )
    return None


def refused(source: RequestSource, model: str, problem: str) -> InferenceError:
    return InferenceError(model, source.protocol, f"not sent: {problem}", cause="client")


def died(source: RequestSource, model: str, death: ServerError) -> ServerError:
    """A new error per request: which request, then how the server died, and its log."""
    return ServerError(
        f"{source.protocol} request to model {model!r} at {source.url} failed: {death.headline}",
        death.log_tail,
    )


def _death(source: RequestSource, model: str, wait_s: float = 0.0) -> ServerError | None:
    if source.server is None:
        return None
    try:
        source.server.check_alive(wait_s)
    except ServerError as death:
        return died(source, model, death)
    return None


def rejected(
    source: RequestSource,
    model: str,
    exc: InferenceServerException,
    version: str = "",
    shapes: Shapes | None = None,
    versions_of: Callable[[str], list[str] | None] | None = None,
    state_of: Callable[[str], str | None] | None = None,
) -> Exception:
    """The server (or gRPC's transport, for UNAVAILABLE and DEADLINE_EXCEEDED) said no."""
    status = exc.status()
    message = exc.message() or str(exc)
    restricted = _RESTRICTED.search(message)
    if restricted:
        return InferenceError(
            model,
            source.protocol,
            f"the server refused the call without its header: {message} (give it with "
            f"--triton-headers '{restricted.group(1)}: ...')",
            status,
        )
    if status in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED"):
        return transport(source, model, exc)
    death = _death(source, model)
    if death is not None:
        return death
    message = _REQUEST_ID.sub("", message)
    if message.strip().lower() == "not found":
        message = (
            f"Triton answered 'Not Found': model {model!r} has no version {version!r}"
            if version
            else f"Triton answered 'Not Found' for model {model!r}"
        )
    if (
        version
        and versions_of is not None
        and (_VERSION_MISSING.search(message) or message.startswith("Triton answered"))
    ):
        have = versions_of(model)
        if have:
            message += (
                f" (the server has version(s) {', '.join(have)} of {model!r}; '' "
                "asks for the latest)"
            )
    if not version and state_of is not None and _UNKNOWN_MODEL.search(message):
        state = state_of(model)
        if state is not None:
            message += (
                f" (the server's repository has {model!r}, but it is not loaded"
                f"{': ' + state if state else ''}; with --model-control-mode=explicit "
                "load it first, e.g. TritonClient.load_model)"
            )
    hint = shape_hint(model, message, shapes)
    if hint:  # first: Triton's own text runs long
        message = f"{hint}; Triton said: {message}"
    if _SIZE_MISMATCH in message and shapes:
        empty = [(name, list(shape)) for name, shape in shapes.items() if 0 in shape]
        for name, shape in empty:
            message += (
                f" (input {name!r} has shape {shape}, which holds no data: a request "
                "carries at least one row)"
            )
    return InferenceError(model, source.protocol, message, status)


_UNEXPECTED_SHAPE = re.compile(
    r"unexpected shape for input '([^']+)' for model '[^']+'\. Expected \[([^\]]*)\], "
    r"got \[([^\]]*)\]"
)
_BATCH_MISMATCH = "batch size does not match other inputs"


def shape_hint(model: str, message: str, shapes: Shapes | None) -> str:
    """What Triton leaves unsaid about a shape it refused: an input without the batch
    dimension of a batched model, or a dimension below zero (over gRPC Triton reads it as a
    byte count or batch size that does not match, and says only that)."""
    negative = {n: list(s) for n, s in (shapes or {}).items() if any(d < 0 for d in s)}
    refused_shape = (_SIZE_MISMATCH, _BATCH_MISMATCH, "Unable to parse 'shape'")
    if negative and any(text in message for text in refused_shape):
        name, shape = next(iter(negative.items()))
        return (
            f"input {name!r} was sent with shape {shape}: a dimension below 0 is no size "
            "(every dimension sent is a count of elements; -1 in a model's config means "
            "'any size', never a value to send)"
        )
    if _BATCH_MISMATCH in message:
        return (
            "the inputs' first dimensions differ or one is below 1: every input of one "
            "request carries the same batch size, at least 1, as its first dimension"
        )
    found = _UNEXPECTED_SHAPE.search(message)
    if found is None:
        return ""
    name, expected, got = found.groups()
    want = [d.strip() for d in expected.split(",") if d.strip()]
    sent = [d.strip() for d in got.split(",") if d.strip()]
    if want and want[0] == "-1" and len(sent) == len(want) - 1 and sent == want[1:]:
        return (
            f"input {name!r} has shape [{', '.join(sent)}], without the batch dimension: "
            f"model {model!r} is batched, so each input's first dimension is the batch; send "
            f"shape [1, {', '.join(sent)}] for one row (x[None] or x.reshape(1, *x.shape))"
        )
    return ""


def transport(source: RequestSource, model: str, exc: BaseException) -> Exception:
    """The connection failed: the server's death if it died, else where and how it failed."""
    detail = str(exc.message() if isinstance(exc, InferenceServerException) else exc)
    lowered = detail.lower()
    timed_out = (
        isinstance(exc, TimeoutError) or "timed out" in lowered or "deadline exceeded" in lowered
    )
    # a refused or reset connection may be a server on its way out: give it time to be reaped
    death = _death(source, model, 0.0 if timed_out else SERVER_DOWN_WAIT_S)
    if death is not None:
        return death
    kind = f"{type(exc).__name__}: {detail}"
    tls = tls_problem(exc, detail)
    if tls is not None:
        return RefusedError(f"{source.protocol} request to {source.url}: {tls}")
    if timed_out:
        text = f"no answer from the server at {source.url} within {source.timeout_s:g}s ({detail})"
    elif isinstance(exc, (ConnectionResetError, BrokenPipeError, http.client.HTTPException)) or any(
        word in lowered for word in _LOST
    ):
        text = (
            f"the server at {source.url} dropped the connection before answering (did it "
            f"crash or restart?): {kind}"
        )
    else:
        text = f"server at {source.url} unreachable: {kind}"
        if source.protocol == "grpc" and "refused" in lowered:
            text += (
                " (where this gRPC address was guessed from the HTTP URL, its port + 1, give "
                "the server's gRPC URL with --triton-grpc-url)"
            )
    return InferenceError(
        model, source.protocol, text, cause="timeout" if timed_out else "connection"
    )


def tls_problem(exc: BaseException, detail: str) -> str | None:
    """A TLS failure is no unreachable server: say what did not verify and what fixes it."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        reason = f"certificate verify failed: {cause.verify_message}"
    elif isinstance(cause, ssl.SSLError):
        reason = cause.reason or str(cause)
    elif "certificate verify failed" in detail.lower() or "CERTIFICATE_VERIFY" in detail:
        reason = detail
    else:
        return None
    if "verify" in reason.lower():
        return (
            f"TLS certificate verification failed: {reason}; give the CA bundle that signed "
            "the server's certificate with --triton-tls-ca (and --triton-tls-server-name where "
            "its name differs from the host)"
        )
    return f"TLS handshake failed: {reason}"


def unexpected(source: RequestSource, model: str, exc: Exception) -> Exception:
    """Neither a rejection nor a transport failure: say what tritonclient raised."""
    if isinstance(exc, (OSError, http.client.HTTPException)):
        return transport(source, model, exc)
    death = _death(source, model)
    if death is not None:
        return death
    return InferenceError(
        model,
        source.protocol,
        f"tritonclient could not make or send the "
        f"request to {source.url}: {type(exc).__name__}: {exc}",
        cause="client",
    )
