"""Debian's nginx as the ingress in front of Triton replicas: a real reverse proxy on
loopback, round-robin over its upstreams, started as a child process in a directory of the
test's own and stopped (with its workers) when the test is done."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pytest_triton.base.processes import die_with_parent
from tests.helpers.locust_runs import free_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
MISSING = (
    "needs Debian's nginx (apt-get install nginx-light; make test and CI's .ci/run install it)"
)


def _config(
    prefix: Path,
    port: int,
    upstreams: Sequence[str],
    tls: tuple[Path, Path] | None = None,
    token: str | None = None,
) -> str:
    servers = "".join(f"    server {u};\n" for u in upstreams)
    temp = "".join(
        f"  {kind}_temp_path {prefix / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {prefix / 'nginx.pid'};\n"
        f"error_log {prefix / 'error.log'};\nevents {{ worker_connections 256; }}\n"
        f"http {{\n  access_log {prefix / 'access.log'};\n{temp}"
        f"  upstream triton {{\n{servers}    keepalive 16;\n  }}\n"
        f"  server {{\n    listen 127.0.0.1:{port}{' ssl' if tls else ''};\n"
        + (f"    ssl_certificate {tls[0]};\n    ssl_certificate_key {tls[1]};\n" if tls else "")
        + (f'    if ($http_authorization != "Bearer {token}") {{ return 401; }}\n' if token else "")
        + "    location / {\n      proxy_pass http://triton;\n      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n    }\n  }\n}\n'
    )


@contextmanager
def round_robin(
    upstreams: Sequence[str],
    prefix: Path,
    *,
    tls: tuple[Path, Path] | None = None,
    token: str | None = None,
) -> Iterator[str]:
    """nginx on an ephemeral loopback port spreading requests over `upstreams` (HOST:PORT);
    with `tls` (certificate, key) it terminates TLS, with `token` it answers 401 to a request
    without `Authorization: Bearer TOKEN`. Yields its HOST:PORT."""
    assert NGINX is not None, MISSING
    prefix.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(_config(prefix, port, upstreams, tls, token))
    proc = subprocess.Popen(
        [NGINX, "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {(prefix / 'error.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the master and its workers
        proc.wait(timeout=10)


@contextmanager
def deployed_behind_tls(
    repository: Path, certificate: tuple[Path, Path], token: str, prefix: Path
) -> Iterator[str]:
    """A tritonserver serving `repository` as deployed (model control none) behind nginx
    terminating TLS with `certificate` and wanting `token`; yields the ingress's HOST:PORT."""
    with deployed_with_metrics_behind_tls(repository, certificate, token, prefix) as (ingress, _):
        yield ingress


@contextmanager
def deployed_with_metrics_behind_tls(
    repository: Path, certificate: tuple[Path, Path], token: str, prefix: Path
) -> Iterator[tuple[str, str]]:
    """As deployed_behind_tls, and a second nginx, as strict, in front of the server's
    Prometheus metrics port: yields both HOST:PORTs (inference, metrics)."""
    from pytest_triton.server import LocalLauncher, ServerArgs

    args = ServerArgs(repository, model_control_mode="none", startup_timeout_s=120)
    with (
        LocalLauncher().start(args) as server,
        round_robin([server.endpoints.http], prefix, tls=certificate, token=token) as ingress,
    ):
        metrics = server.endpoints.metrics
        assert metrics is not None, "a local server always publishes its metrics port"
        with round_robin(
            [metrics], prefix / "metrics", tls=certificate, token=token
        ) as metrics_ingress:
            yield ingress, metrics_ingress
