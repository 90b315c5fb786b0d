"""Certificates made by the test with Debian's openssl: a CA, a server certificate for
localhost / 127.0.0.1 signed by it, a client certificate for mutual TLS, and a second CA that
signed nothing of ours (the "wrong CA")."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl")
MISSING = "needs Debian's openssl (apt-get install openssl)"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _run(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None, MISSING
    subprocess.run(
        [OPENSSL, *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-keyout",
        str(key),
        "-out",
        str(cert),
        cwd=directory,
    )
    return cert, key


def _signed(
    directory: Path, name: str, ca: tuple[Path, Path], extensions: str
) -> tuple[Path, Path]:
    key, csr, cert = (directory / f"{name}.{s}" for s in ("key", "csr", "pem"))
    ext = directory / f"{name}.ext"
    ext.write_text(extensions)
    _run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        f"/CN={name}",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        cwd=directory,
    )
    _run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca[0]),
        "-CAkey",
        str(ca[1]),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(ext),
        "-out",
        str(cert),
        cwd=directory,
    )
    return cert, key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "test-ca")
    server = _signed(
        directory,
        "server",
        ca,
        "subjectAltName=DNS:localhost,DNS:triton.test,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    client = _signed(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    other = _ca(directory, "other-ca")
    return Pki(ca[0], server[0], server[1], client[0], client[1], other[0])


def grpc_tls_flags(pki: Pki, *, mutual: bool = False) -> tuple[str, ...]:
    """tritonserver's own gRPC TLS with the server certificate (mutual: clients must show a
    certificate the CA signed)."""
    flag = "--grpc-use-ssl-mutual=true" if mutual else "--grpc-use-ssl=true"
    return (
        flag,
        f"--grpc-server-cert={pki.server_cert}",
        f"--grpc-server-key={pki.server_key}",
        f"--grpc-root-cert={pki.ca}",
    )
