"""Server addresses: URL parsing, a server's endpoint pair, and the loopback rule for load.

Load is only ever sent to loopback addresses unless the caller opts in: a load test pointed at
a shared server by a typo is an outage, not a test.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pytest_triton.base.errors import ConfigError

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


TLS_SCHEMES = {"https": "http", "grpcs": "grpc"}  # scheme -> the protocol it secures


@dataclass(frozen=True)
class Endpoints:
    http: str  # host:port, as tritonclient takes it
    grpc: str
    metrics: str | None = None
    tls: frozenset[str] = frozenset()  # protocols reached over TLS (https://, grpcs://)

    def url(self, protocol: str) -> str:
        return self.http if protocol == "http" else self.grpc

    def encode(self) -> str:
        """As one option value (a Locust master hands its options to its workers)."""
        tls = "".join(f",tls={p}" for p in sorted(self.tls))
        return f"http={self.http},grpc={self.grpc}{tls}"

    @classmethod
    def decode(cls, text: str) -> Endpoints:
        pairs = [p.split("=", 1) for p in text.split(",") if "=" in p]
        parts: Mapping[str, str] = {k: v for k, v in pairs if k != "tls"}
        if "http" not in parts or "grpc" not in parts:
            raise ConfigError(f"malformed endpoints {text!r}; expected http=H:P,grpc=H:P")
        return cls(parts["http"], parts["grpc"], tls=frozenset(v for k, v in pairs if k == "tls"))


def parse_url(url: str, default_scheme: str = "http") -> tuple[str, str]:
    """(scheme, host:port) from 'http://h:p', 'grpc://h:p' (or https://, grpcs://) or 'h:p'."""
    text = url if "://" in url else f"{default_scheme}://{url}"
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("http", "grpc", *TLS_SCHEMES) or not parts.hostname or port is None:
        raise ConfigError(
            f"Triton URL {url!r} is not of the form http://HOST:PORT or grpc://HOST:PORT "
            "(https:// and grpcs:// over TLS; e.g. http://127.0.0.1:8000)"
        )
    return parts.scheme, f"{parts.hostname}:{port}"


def endpoints_from(url: str, grpc_url: str | None = None) -> Endpoints:
    """Endpoints of a server given one URL; the other protocol defaults to Triton's port pair
    (gRPC = HTTP port + 1, as 8000/8001)."""
    scheme, hostport = parse_url(url)
    host, port = hostport.rsplit(":", 1)
    tls = {TLS_SCHEMES[scheme]} if scheme in TLS_SCHEMES else set()
    if scheme in ("http", "https"):
        http = hostport
        if grpc_url:
            grpc_scheme, grpc = parse_url(grpc_url, "grpc")
            tls |= {"grpc"} if grpc_scheme == "grpcs" else set()
        else:
            grpc = f"{host}:{int(port) + 1}"
    else:
        grpc = hostport
        http = f"{host}:{int(port) - 1}"
    return Endpoints(http, grpc, tls=frozenset(tls))


def is_loopback(url: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the usual loopback names (names are not resolved: what a
    name resolves to can change between this check and the load)."""
    _, hostport = parse_url(url)
    return is_loopback_host(hostport.rsplit(":", 1)[0])


def is_loopback_host(host: str) -> bool:
    """The host part alone (an address, [v6] or a name): the same rule as is_loopback."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() in LOOPBACK_NAMES


def check_host(url: str, allow_remote: bool = False) -> None:
    """Refuse load on anything but loopback unless the caller opted in."""
    parse_url(url)  # a malformed URL gets the format message first
    if not allow_remote and not is_loopback(url):
        raise ConfigError(
            f"refusing to send load to {url}: only loopback hosts (127.0.0.1, localhost, ::1) "
            "are allowed by default. Pass --triton-allow-remote (or TRITON_ALLOW_REMOTE=true) "
            "if you really mean to load that server."
        )
