"""What a run's settings mean for one user class: its model name, batch size, protocol and URL.

Users (in each worker) and the run (in the master) must agree on these; both resolve them
here, from the same propagated settings. No locust import here.
"""

from __future__ import annotations

import socket
from typing import Any

import psutil

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import client_security
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.security import Security
from pytest_triton.base.urls import (
    TLS_SCHEMES,
    Endpoints,
    check_host,
    endpoints_from,
    is_loopback_host,
    parse_url,
)
from pytest_triton.client.triton_client import Protocol, Transport
from pytest_triton.client.wire.shm import check_offered
from pytest_triton.load.runner.embedded import EmbeddedModel

EMBEDDED = "127.0.0.1:0"  # where an embedded server runs, for the loopback rule


def embedded_endpoints(config: TritonConfig) -> Endpoints | None:
    return Endpoints.decode(config.load.endpoints) if config.load.endpoints else None


def is_this_machine(host: str) -> bool:
    """Whether `host` (a name or address) is one of this machine's own addresses (a Locust
    worker asks it of its master's address)."""
    if is_loopback_host(host):
        return True
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host.strip("[]"), None)}
    except OSError:
        return False
    own = {a.address.split("%")[0] for nics in psutil.net_if_addrs().values() for a in nics}
    return bool(addresses & own)


def check_load_allowed(host: str, config: TritonConfig, master_host: str | None = None) -> None:
    """The loopback rule, except for the embedded server the run started itself (its master
    named the address); and a worker on another machine (reaching its master at
    `master_host`) cannot load an embedded server on the master's loopback."""
    known = embedded_endpoints(config)
    hostport = parse_url(host)[1]
    if known is None or hostport not in (known.http, known.grpc):
        check_host(host, config.load.allow_remote)
        return
    server_host = hostport.rsplit(":", 1)[0]
    if master_host and is_loopback_host(server_host) and not is_this_machine(master_host):
        raise ConfigError(
            f"the master's embedded tritonserver listens on its loopback ({hostport}), which "
            f"this worker on another machine (its master is {master_host}) cannot reach: "
            "start the master with --triton-serve-address ADDRESS (an address of the "
            "master's machine that the workers reach), or give --host of a running server"
        )


def user_model(user_class: Any, config: TritonConfig) -> str:
    """--triton-model, else the class's `model`, else the name its served spec gets."""
    if config.load.model:
        return config.load.model
    if getattr(user_class, "model", None):
        return str(user_class.model)
    served: EmbeddedModel | None = getattr(user_class, "served", None)
    if served is not None:
        return served.model_name(config.serving.format)
    raise ConfigError(
        f"{user_class.__name__} names no model: set its `model` (a Triton model "
        "name) or `served` attribute, or pass --triton-model"
    )


def user_batch_size(user_class: Any, config: TritonConfig) -> int:
    batch = config.load.batch_size or int(getattr(user_class, "batch_size", 1))
    if batch < 1:
        raise ConfigError(f"{user_class.__name__}.batch_size must be >= 1, got {batch}")
    return batch


def user_protocol(user_class: Any, host: str, config: TritonConfig, index: int = 0) -> Protocol:
    """The class's own `protocol`, else --triton-protocol (users take several in turn), else
    the host URL's scheme (http:// or grpc://)."""
    fixed = getattr(user_class, "protocol", None)
    if fixed is not None:
        if fixed not in ("http", "grpc"):
            raise ConfigError(f"{user_class.__name__}.protocol must be 'http' or 'grpc'")
        return "grpc" if fixed == "grpc" else "http"
    if config.client.protocol:
        return (
            "grpc"
            if config.client.protocol[index % len(config.client.protocol)] == "grpc"
            else "http"
        )
    scheme, _ = parse_url(host)
    return "grpc" if scheme in ("grpc", "grpcs") else "http"


def user_endpoint(protocol: Protocol, host: str, config: TritonConfig) -> str:
    """host:port for the protocol: the embedded server's own ports when known, else the host
    URL (and Triton's HTTP/gRPC port pair convention for the other protocol)."""
    scheme, hostport = parse_url(host)
    known = embedded_endpoints(config)
    if known is not None and hostport in (known.http, known.grpc):
        return known.url(protocol)
    if TLS_SCHEMES.get(scheme, scheme) == protocol:
        return hostport
    return endpoints_from(host, config.server.grpc_url).url(protocol)


def user_security(protocol: Protocol, host: str, config: TritonConfig) -> Security:
    """TLS (when the host's URL for this protocol is https:// or grpcs://) and headers."""
    known = embedded_endpoints(config)
    if known is not None and parse_url(host)[1] in (known.http, known.grpc):
        return client_security(config)  # the embedded server: plain, headers as asked
    tls = protocol in endpoints_from(host, config.server.grpc_url).tls
    return client_security(config, tls)


def stats_protocol(host: str, config: TritonConfig) -> Protocol:
    """HTTP for the statistics API wherever its port is known, else the host's protocol."""
    scheme, hostport = parse_url(host)
    known = embedded_endpoints(config)
    if scheme in ("http", "https") or (known is not None and hostport in (known.http, known.grpc)):
        return "http"
    return "grpc"


def checked_shared_memory(config: TritonConfig, host: str | None) -> Transport:
    """The run's transport, refused before any load when the server at `host` (None: the
    embedded server, on this machine) cannot use it."""
    transport = user_shared_memory(config)
    check_offered(transport, host or EMBEDDED)
    return transport


def user_shared_memory(config: TritonConfig) -> Transport:
    """--triton-shared-memory: one transport for every user of a run."""
    transports = config.client.shared_memory
    if len(transports) != 1:
        raise ConfigError(
            f"a load test uses one --triton-shared-memory transport, got "
            f"{','.join(transports)}: pass none, system or cuda"
        )
    return "system" if transports[0] == "system" else "cuda" if transports[0] == "cuda" else "none"
