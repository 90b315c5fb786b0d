"""Errors a user sees: each one names what was wrong and how to fix it."""

from __future__ import annotations

from typing import Literal


class TritonTestError(Exception):
    """Base class of every error pytest-triton raises on purpose."""


class SpecError(TritonTestError, ValueError):
    """A ModelSpec that cannot be exported or served, detected before any export."""


class DatasetError(TritonTestError, ValueError):
    """A dataset an accuracy check cannot use (batches that do not fit the model's inputs,
    labels missing for a label metric, too few samples for the rule), refused before any
    request."""


class ParityNotApplicable(TritonTestError):
    """Element-wise parity asked of a reduced-precision (int8) variant, whose answers differ
    from fp32 PyTorch's by design: judge it with assert_accuracy on a dataset. pytest's
    plugin reports the test as skipped with this reason."""


class ExportError(TritonTestError):
    """torch.jit / torch.onnx failed on a spec; carries the exporter's own message."""


class ConfigError(TritonTestError, ValueError):
    """A --triton-* option or triton_* ini value that cannot be used."""


class RefusedError(ConfigError):
    """A server or an ingress that refused the first request (HTTP 401/403, TLS verification,
    a closed port): says the status or TLS reason, the URL as given and the option to fix."""


class ServerError(TritonTestError):
    """A tritonserver that could not start, crashed, or did not become ready.

    The message always ends with the tail of the server's log, because the cause
    (bad flag, missing backend, port in use) is only ever written there.
    """

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.headline = message  # the message without the log
        self.log_tail = log_tail
        text = message
        if log_tail:
            text += "\n--- tritonserver log (tail) ---\n" + log_tail.rstrip()
        super().__init__(text)


class ModelLoadError(ServerError):
    """A model the server refused to load; names the model and Triton's reason."""

    def __init__(self, model: str, reason: str, log_tail: str = "") -> None:
        self.model = model
        self.reason = reason
        super().__init__(f"model {model!r} failed to load: {reason}", log_tail)


FailureCause = Literal["server", "timeout", "connection", "client"]
"""Who failed a request: the server (it answered with an error), a timeout, the connection
(refused, reset, dropped), or the client (the request could not be made or sent)."""


class InferenceError(TritonTestError):
    """A request the server rejected, with model, protocol and Triton's own message; `cause`
    says who failed it (load reports count failed requests by it)."""

    def __init__(
        self,
        model: str,
        protocol: str,
        message: str,
        status: str | None = None,
        *,
        cause: FailureCause = "server",
    ) -> None:
        self.model = model
        self.protocol = protocol
        self.server_message = message
        self.status = status
        self.cause: FailureCause = cause
        where = (
            f"{protocol} request to the server"
            if model == "-"  # a server-wide call (health, metadata)
            else f"{protocol} request to model {model!r}"
        )
        code = f" [{status}]" if status else ""
        super().__init__(f"{where} failed{code}: {message}")


class SharedMemoryError(TritonTestError):
    """A shared memory region that could not be made, registered or used; says which and
    what the server needs to map it."""


class DeployedModelError(TritonTestError):
    """A deployed model that is not what its spec says: not ready, another version, or a
    served config whose signature differs; names every difference."""

    def __init__(self, model: str, problems: list[str]) -> None:
        self.model = model
        self.problems = problems
        listed = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"deployed model {model!r} does not match its spec:\n{listed}\n"
            "(the server's config is what it serves; fix the deployment or the ModelSpec)"
        )


class WrongAnswer(TritonTestError):
    """An answer that came back under load without error but is not PyTorch's: an output
    missing, of another shape or dtype, or (on a sampled answer) outside the parity
    tolerance. Load generators report it as a failed request; its text starts with
    "wrong answer:"."""
