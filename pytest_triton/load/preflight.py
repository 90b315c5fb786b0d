"""One request to a given server before any user or generator starts (Locust, triton-perf,
triton-tune): a server or ingress that refuses it (HTTP 401/403, TLS verification, a closed
port) stops the run at once, naming the cause and the option that fixes it, instead of a run
of its full duration whose every request failed. No Locust import here."""

from __future__ import annotations

from collections.abc import Iterable

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import client_security
from pytest_triton.base.urls import TLS_SCHEMES, endpoints_from, parse_url
from pytest_triton.client import refusals
from pytest_triton.client.wire.request import Protocol


def targets(
    host: str, option: str, protocols: Iterable[Protocol], config: TritonConfig
) -> list[refusals.Target]:
    """Where each protocol's requests go for a host given with `option` (--host, --url):
    the host's own address, the --triton-grpc-url given, or the gRPC port guessed from it."""
    scheme, hostport = parse_url(host)
    endpoints = endpoints_from(host, config.server.grpc_url)
    found = []
    for protocol in dict.fromkeys(protocols):
        own = TLS_SCHEMES.get(scheme, scheme) == protocol
        given_grpc = protocol == "grpc" and not own and config.server.grpc_url
        security = client_security(config, protocol in endpoints.tls)
        found.append(
            refusals.Target(
                given=config.server.grpc_url if given_grpc and config.server.grpc_url else host,
                option="--triton-grpc-url" if given_grpc else option,
                protocol=protocol,
                hostport=hostport if own else endpoints.url(protocol),
                security=security,
                derived=not own and not given_grpc,
            )
        )
    return found


def preflight_load(
    host: str, option: str, protocols: Iterable[Protocol], config: TritonConfig
) -> list[refusals.Answer]:
    """One readiness request per protocol the run uses; RefusedError on a refusal."""
    return [refusals.raise_if_refused(t) for t in targets(host, option, protocols, config)]
