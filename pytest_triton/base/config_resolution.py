"""One resolved TritonConfig from a chain of sources, and the checks that span settings
(a goodput target needs its SLO, replicas need the service in front of them).

Precedence is the order of the sources handed to `resolve` (pytest: factory argument > CLI >
ini > default). An explicit 0, False or "" is a value and wins over the levels below it;
only a setting nobody set falls through.
"""

from __future__ import annotations

from typing import Any

from pytest_triton.base.config import SETTINGS, TritonConfig, finish
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.security import Security, security_from
from pytest_triton.base.setting_sources import Source, from_mapping


def resolve(*sources: Source, **overrides: Any) -> TritonConfig:
    """Resolve every setting once; keyword arguments are factory arguments (highest)."""
    chain = ([from_mapping(overrides, "factory argument")] if overrides else []) + list(sources)
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for setting in SETTINGS:
        raw, origin = setting.default, "default"
        for source in chain:
            found = source(setting)
            if found is not None:
                raw, origin = found
                break
        values[setting.name] = setting.convert(raw, origin)
        origins[setting.name] = origin
    values["origins"] = origins
    return finish(values)


def check_replicas_behind(config: TritonConfig, service: str | None, flag: str) -> None:
    """--triton-replicas needs the balancer's address in front of them (`flag` names the
    front end's way to give it: --triton-url for pytest, --host for Locust)."""
    if config.server.replicas and not service:
        raise ConfigError(
            "--triton-replicas names the replicas behind a running service's address: give "
            f"that address with {flag}"
        )


def check_goodput(config: TritonConfig, slo_ms: float | None = None) -> float | None:
    """The SLO --perf-goodput counts within: --perf-slo-ms, else `slo_ms` (triton-perf's
    --latency-bound); a goodput target without either is refused."""
    slo = config.gate.perf_slo_ms or slo_ms
    if config.gate.perf_goodput is not None and slo is None:
        raise ConfigError(
            "--perf-goodput counts requests within a latency SLO: give it with --perf-slo-ms "
            "(e.g. --perf-goodput 0.99 --perf-slo-ms 20)"
        )
    return slo


def check_stream_goodput(config: TritonConfig) -> None:
    """A streams' goodput target needs at least one SLO to count streams within."""
    g = config.gate
    if (
        g.perf_stream_goodput is not None
        and g.perf_slo_ttft_ms is None
        and (g.perf_slo_itl_ms is None)
    ):
        raise ConfigError(
            "--perf-stream-goodput counts streams within a TTFT and/or ITL SLO: give "
            "--perf-slo-ttft-ms and/or --perf-slo-itl-ms (e.g. --perf-stream-goodput 0.99 "
            "--perf-slo-ttft-ms 50 --perf-slo-itl-ms 10)"
        )


def client_security(config: TritonConfig, tls: bool = False) -> Security:
    """The TLS files and request headers of the config, with TLS on or off for one protocol
    (whether its URL is https:// or grpcs://)."""
    c = config.client
    settings = security_from(c.tls_ca, c.tls_cert, c.tls_key, c.tls_server_name, c.headers)
    return settings.for_protocol(tls)
