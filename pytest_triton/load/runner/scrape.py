"""The master's scraper of a soak (--triton-soak, or a memory or drift target): once a second
it reads Triton's Prometheus metrics and the RSS of the server's processes where they run on
this machine (load/measure/soak.py parses and judges them). The scrape goes out with the same
TLS files and request headers as every other call (behind an ingress that wants a token the
metrics do too). http.client's socket is gevent's here, so a slow scrape never blocks the
load."""

from __future__ import annotations

import http.client
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import gevent
import psutil

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import client_security
from pytest_triton.base.security import PLAIN, Security
from pytest_triton.base.urls import endpoints_from, is_loopback_host
from pytest_triton.load.measure.soak import SoakSample, listening_process, summarize, tree_rss

log = logging.getLogger("pytest_triton.load")
SCRAPE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 2.0


def soak_wanted(config: TritonConfig) -> bool:
    gate = config.gate
    return bool(
        config.load.soak
        or gate.perf_memory_growth_mb_per_min is not None
        or gate.perf_p99_drift is not None
    )


def metrics_url(config: TritonConfig, embedded_metrics: str | None, host: str | None) -> str:
    """--triton-metrics-url, else the embedded server's, else Triton's convention for --host
    (metrics on the HTTP port + 2, over TLS when the host's HTTP is https://)."""
    url = config.load.metrics_url
    scheme = "http"
    if url is None and embedded_metrics:
        url = embedded_metrics
    if url is None and host:
        endpoints = endpoints_from(host, config.server.grpc_url)
        hostname, port = endpoints.http.rsplit(":", 1)
        url = f"{hostname}:{int(port) + 2}"
        scheme = "https" if "http" in endpoints.tls else "http"
    if url is None:
        raise ValueError("no server to scrape")
    if "://" not in url:
        url = f"{scheme}://{url}"
    parts = urlsplit(url)
    return url if parts.path not in ("", "/") else url.rstrip("/") + "/metrics"


def server_process(pid: int | None, host: str | None) -> psutil.Process | None:
    """The server's main process on this machine: the embedded server's, or the one listening
    on a loopback --host's HTTP port; None for a server elsewhere."""
    if pid is not None:
        try:
            return psutil.Process(pid)
        except psutil.Error:
            return None
    if host is None:
        return None
    hostname, port = endpoints_from(host).http.rsplit(":", 1)
    return listening_process(int(port)) if is_loopback_host(hostname) else None


def metrics_security(config: TritonConfig, url: str) -> Security:
    """The config's TLS files and headers, with TLS on for an https:// metrics URL."""
    return client_security(config, urlsplit(url).scheme == "https")


class _Connection(http.client.HTTPSConnection):
    """HTTPS through Security.wrap: its CA bundle, client certificate and server-name
    override, as the other calls use them."""

    def __init__(self, host: str, port: int | None, timeout: float, security: Security) -> None:
        super().__init__(host, port, timeout=timeout)
        self.security = security

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self.security.wrap(self.sock, self.host)


def fetch(url: str, security: Security = PLAIN, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    """GET `url` (http:// or https://) with the security's headers; a status other than 200 is
    an OSError naming it (never a header's value)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"metrics URL {url!r} is not http://HOST:PORT/PATH or https://...")
    tls = security.for_protocol(parts.scheme == "https")
    connection: http.client.HTTPConnection = (
        _Connection(parts.hostname, parts.port, timeout_s, tls)
        if tls.tls
        else http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    )
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("GET", path, headers=tls.header_values())
        answer = connection.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise OSError(f"HTTP {answer.status} {answer.reason}")
        return body.decode("utf-8", "replace")
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from None
    finally:
        connection.close()


class Scraper:
    def __init__(
        self, url: str, process: psutil.Process | None, security: Security = PLAIN
    ) -> None:
        self.url = url
        self.process = process
        self.security = security
        security.header_values()  # a header naming an unset variable fails here, not later
        self.samples: list[SoakSample] = []
        self.errors: list[str] = []
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        log.info(
            "pytest-triton: soak: scraping %s every %gs%s",
            self.url,
            SCRAPE_INTERVAL_S,
            f", RSS of process {self.process.pid} and its children" if self.process else "",
        )
        self._greenlet = gevent.spawn(self._loop)

    def _loop(self) -> None:
        next_at = time.monotonic()
        while True:
            self.scrape()
            next_at += SCRAPE_INTERVAL_S
            gevent.sleep(max(0.0, next_at - time.monotonic()))

    def scrape(self) -> None:
        metrics: dict[str, float] = {}
        try:
            metrics = summarize(fetch(self.url, self.security))
        except (OSError, ValueError) as exc:
            if not self.errors:
                log.warning("pytest-triton: soak: cannot scrape %s: %s", self.url, exc)
            self.errors.append(str(exc))
        rss = tree_rss(self.process) if self.process is not None else None
        if metrics or rss is not None:
            self.samples.append(SoakSample(time.time(), metrics, rss))

    def stop(self) -> None:
        if self._greenlet is not None and self._greenlet is not gevent.getcurrent():
            self._greenlet.kill(block=False)
        self._greenlet = None


def embedded_pid(server: Any) -> int | None:
    """The embedded server's tritonserver pid (None when it is not a local process)."""
    deployment = getattr(server, "deployment", None)
    process = getattr(getattr(deployment, "server", None), "process", None)
    pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None
