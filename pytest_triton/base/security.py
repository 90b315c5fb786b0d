"""How a client reaches a deployed server beyond plain TCP: TLS (a CA bundle, a client
certificate for mutual TLS, a server-name override) and extra request headers such as an
auth token.

Header values may name environment variables (`Authorization: Bearer ${TRITON_TOKEN}`): the
configuration keeps the text as written, and the value is read only when a client is made, so
a token never reaches a log, a report or a Locust worker's command line.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_triton.base.errors import ConfigError

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
REDACTED = "<redacted>"


def parse_header(text: str) -> tuple[str, str]:
    """'Name: value' (the value may hold ${VARIABLES}) as a (name, value) pair."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not name or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name):
        raise ConfigError(
            f"request header {text!r} is not of the form 'Name: value' "
            "(e.g. 'Authorization: Bearer ${TRITON_TOKEN}')"
        )
    return name, value.strip()


def expand(value: str, environ: Mapping[str, str] | None = None) -> str:
    """${VARIABLE}s of a header value from the environment; a missing one is an error that
    names it (never the value)."""
    env = os.environ if environ is None else environ

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ConfigError(
                f"request header value names ${{{name}}}, which is not set in the environment"
            )
        return env[name]

    return _VARIABLE.sub(lookup, value)


@dataclass(frozen=True)
class Security:
    """TLS and headers of one client; `Security()` is plain TCP without extra headers."""

    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # as written

    def __post_init__(self) -> None:
        for label, path in (
            ("CA bundle", self.ca_file),
            ("client certificate", self.cert_file),
            ("client key", self.key_file),
        ):
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"TLS {label} {path!r} does not exist")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(
                "mutual TLS needs both a client certificate and its key "
                "(--triton-tls-cert and --triton-tls-key)"
            )

    def header_values(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers to send, variables expanded: for the wire only, never for printing."""
        return {name: expand(value, environ) for name, value in self.headers}

    def described(self) -> dict[str, object]:
        """What a report may show: files and names, never a header's value."""
        return {
            "tls": self.tls,
            "ca_file": self.ca_file,
            "client_certificate": self.cert_file,
            "server_name": self.server_name,
            "headers": {name: REDACTED for name, _ in self.headers},
        }

    def ssl_context(self, alpn: Sequence[str] = ()) -> ssl.SSLContext:
        """A client context that verifies the server (against the CA bundle, else the
        system's) and presents the client certificate for mutual TLS."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        if alpn:
            context.set_alpn_protocols(list(alpn))
        return context

    def wrap(self, sock: socket.socket, host: str, alpn: Sequence[str] = ()) -> socket.socket:
        """The socket, with TLS when asked for (server name: the override, else the host)."""
        if not self.tls:
            return sock
        return self.ssl_context(alpn).wrap_socket(sock, server_hostname=self.server_name or host)

    def pem(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """CA bundle, client key and client certificate as gRPC's credentials take them."""

        def read(path: str | None) -> bytes | None:
            return Path(path).read_bytes() if path is not None else None

        return read(self.ca_file), read(self.key_file), read(self.cert_file)

    def for_protocol(self, tls: bool) -> Security:
        """The same headers and files, with TLS on or off (HTTP and gRPC may differ: Triton's
        --grpc-use-ssl secures gRPC only)."""
        return Security(
            tls, self.ca_file, self.cert_file, self.key_file, self.server_name, self.headers
        )


PLAIN = Security()


def security_from(
    ca_file: str | None,
    cert_file: str | None,
    key_file: str | None,
    server_name: str | None,
    headers: Sequence[str],
) -> Security:
    """A client's security from the settings (TLS itself comes with each protocol's URL)."""
    return Security(
        False, ca_file, cert_file, key_file, server_name, tuple(parse_header(h) for h in headers)
    )
