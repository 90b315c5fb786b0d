"""The pytest-triton options of a Locust run, and what they mean for one user class.

Users (in each worker) and the hooks (in the master) must agree on a user's model name, batch
size, protocol and URL; both resolve them here, from the same propagated options. No locust
import here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..client import Protocol
from ..errors import ConfigError
from ..launchers.base import Endpoints
from ..launchers.external import endpoints_from, parse_url
from .embedded import EmbeddedModel, decode_endpoints


@dataclass(frozen=True)
class RunSettings:
    """Parsed --triton-* options of a Locust run (every field optional)."""

    protocol: Protocol | None = None
    batch_size: int | None = None
    model: str | None = None
    fmt: str | None = None
    max_requests: int | None = None
    allow_remote: bool = False
    endpoints: Endpoints | None = None

    @classmethod
    def from_options(cls, options: Any) -> RunSettings:
        """From locust's parsed options (None outside the locust CLI: library use). The web UI
        hands custom options over as strings, the command line as typed values: take both."""
        if options is None:
            return cls()
        get = lambda name: getattr(options, name, None)  # noqa: E731
        endpoints = option_str(get("triton_endpoints"))
        batch = option_int(get("triton_batch_size"), "--triton-batch-size")
        max_requests = option_int(get("triton_max_requests"), "--triton-max-requests")
        protocol = option_str(get("triton_protocol"))
        if protocol not in (None, "http", "grpc"):
            raise ConfigError(f"--triton-protocol must be http or grpc, got {protocol!r}")
        return cls(
            protocol=protocol,  # type: ignore[arg-type]
            batch_size=batch,
            model=option_str(get("triton_model")),
            fmt=option_str(get("triton_format")),
            max_requests=max_requests,
            allow_remote=option_bool(get("triton_allow_remote")),
            endpoints=decode_endpoints(endpoints) if endpoints else None,
        )


def option_str(value: Any) -> str | None:
    text = "" if value is None else str(value).strip()
    return text or None


def option_int(value: Any, flag: str) -> int | None:
    text = option_str(value)
    if text is None:
        return None
    try:
        number = int(text)
    except ValueError:
        raise ConfigError(f"{flag} must be an integer, got {text!r}") from None
    if number < 1:
        raise ConfigError(f"{flag} must be >= 1, got {number}")
    return number


def option_float(value: Any, flag: str) -> float | None:
    text = option_str(value)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{flag} must be a number, got {text!r}") from None


def option_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return (option_str(value) or "").lower() in ("1", "true", "yes", "on")


def user_model(user_class: Any, settings: RunSettings) -> str:
    """--triton-model, else the class's `model`, else the name its served spec gets."""
    if settings.model:
        return settings.model
    if getattr(user_class, "model", None):
        return str(user_class.model)
    served: EmbeddedModel | None = getattr(user_class, "served", None)
    if served is not None:
        return served.model_name(settings.fmt)
    raise ConfigError(f"{user_class.__name__} names no model: set its `model` (a Triton model "
                      "name) or `served` attribute, or pass --triton-model")


def user_batch_size(user_class: Any, settings: RunSettings) -> int:
    batch = settings.batch_size or int(getattr(user_class, "batch_size", 1))
    if batch < 1:
        raise ConfigError(f"{user_class.__name__}.batch_size must be >= 1, got {batch}")
    return batch


def user_protocol(user_class: Any, host: str, settings: RunSettings) -> Protocol:
    """The class's own `protocol`, else the host URL's scheme (http:// or grpc://)."""
    fixed = getattr(user_class, "protocol", None)
    if fixed is not None:
        if fixed not in ("http", "grpc"):
            raise ConfigError(f"{user_class.__name__}.protocol must be 'http' or 'grpc'")
        return "grpc" if fixed == "grpc" else "http"
    scheme, _ = parse_url(host)
    return "grpc" if scheme == "grpc" else "http"


def user_endpoint(protocol: Protocol, host: str, settings: RunSettings) -> str:
    """host:port for the protocol: the embedded server's own ports when known, else the host
    URL (and Triton's HTTP/gRPC port pair convention for the other protocol)."""
    scheme, hostport = parse_url(host)
    known = settings.endpoints
    if known is not None and hostport in (known.http, known.grpc):
        return known.url(protocol)
    if scheme == protocol:
        return hostport
    return endpoints_from(host).url(protocol)


def stats_protocol(host: str, settings: RunSettings) -> Protocol:
    """HTTP for the statistics API wherever its port is known, else the host's protocol."""
    scheme, hostport = parse_url(host)
    known = settings.endpoints
    if scheme == "http" or (known is not None and hostport in (known.http, known.grpc)):
        return "http"
    return "grpc"
