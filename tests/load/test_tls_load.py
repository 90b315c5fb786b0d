"""Locust users through a TLS ingress that wants a token (Debian's nginx in
front of a real tritonserver, certificates made by the test): requests counted by the server
equal the report's, the token never printed, and without it every request fails. The soak's
metrics scrape goes through a TLS ingress with the token as well."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.security import Security
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.load.runner.scrape import Scraper, metrics_security, metrics_url
from pytest_triton.repository.builder import Repository
from pytest_triton.server import LocalLauncher, ServerArgs
from tests.helpers import certificates, nginx
from tests.helpers.certificates import Pki, make_pki
from tests.helpers.locust_runs import REPO, Locust, run_locust, subprocess_env, triton_perf_args
from tests.helpers.probe_models import probe_spec
from tests.helpers.raw_models import write_python_model

pytestmark = [
    pytest.mark.load,
    pytest.mark.triton,
    pytest.mark.skipif(certificates.OPENSSL is None, reason=certificates.MISSING),
    pytest.mark.skipif(nginx.NGINX is None, reason=nginx.MISSING),
]
LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "add_one.py"
TOKEN = "l0cust-t0ken-value"


LOAD_S = 20  # the load runs through each TLS peer


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Pki]]:
    """The probe models behind nginx with TLS and the token; the metrics port behind another:
    (ingress, metrics ingress, certificates)."""
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    root = tmp_path_factory.mktemp("repo")
    write_python_model(root, "add_one")
    spec = dataclasses.replace(probe_spec(), formats=("torchscript-trace",), triton_name="probe")
    probe = Repository(root, [spec])
    probe.plan(ServerTarget())
    probe.ensure_all()
    certificate = (pki.server_cert, pki.server_key)
    prefix = tmp_path_factory.mktemp("nginx")
    with nginx.deployed_with_metrics_behind_tls(root, certificate, TOKEN, prefix) as ingresses:
        yield (*ingresses, pki)


@pytest.fixture(scope="module")
def secured(deployed: tuple[str, str, Pki]) -> tuple[str, Pki]:
    ingress, _, pki = deployed
    return ingress, pki


def secure_env(pki: Pki, with_token: bool = True) -> dict[str, str]:
    extra = {
        "TRITON_TLS_CA": str(pki.ca),
        "TRITON_HEADERS": "Authorization: Bearer ${INGRESS_TOKEN}",
        "TRITON_PROTOCOL": "http",
    }
    if with_token:
        extra["INGRESS_TOKEN"] = TOKEN
    else:
        extra["INGRESS_TOKEN"] = "wrong"
    return subprocess_env(**extra)


def test_locust_users_load_through_the_tls_ingress(
    secured: tuple[str, Pki], tmp_path: Path
) -> None:
    ingress, pki = secured
    args = ("--headless", "-u", "2", "-r", "2", "-t", f"{LOAD_S}s", "--host", f"https://{ingress}")
    run = run_locust(LOCUSTFILE, *args, tmp_path=tmp_path, env=secure_env(pki))
    assert run.code == 0, run.tail()
    assert run.report is not None
    measured = run.report["measured"]
    assert measured["requests"] > 0 and measured["failures"] == 0, run.tail()
    (server,) = run.report["server"]
    # statistics read through TLS too: the server counted every request the report did, and at
    # most one more per user (a request in flight when Locust stopped that user)
    assert measured["requests"] <= server["success_count"] <= measured["requests"] + 2
    assert TOKEN not in run.output


def test_without_the_token_every_request_fails(secured: tuple[str, Pki], tmp_path: Path) -> None:
    ingress, pki = secured
    args = ("--headless", "-u", "1", "-r", "1", "-t", "2s", "--host", f"https://{ingress}")
    run = run_locust(LOCUSTFILE, *args, tmp_path=tmp_path, env=secure_env(pki, with_token=False))
    assert run.code != 0
    assert "401" in run.output or "Unauthorized" in run.output, run.tail()


def test_triton_perf_measures_through_the_tls_ingress(
    secured: tuple[str, Pki], tmp_path: Path
) -> None:
    """triton-perf's generator and its statistics reads go through TLS with the token."""
    ingress, pki = secured
    out = tmp_path / "perf.json"
    cmd = [
        *triton_perf_args("tests.helpers.probe_models:probe_spec"),
        "--url",
        f"https://{ingress}",
        "--model-name",
        "probe",
        "-b",
        "2",
        "--concurrency-range",
        "2",
        "-p",
        "1500",
        "--warmup",
        "300",
        "--json",
        str(out),
        "--no-progress",
    ]
    finished = Locust(cmd, env=secure_env(pki)).finish(timeout=120)
    assert finished.code == 0, finished.tail()
    (point,) = json.loads(out.read_text())["points"]
    assert point["requests"] > 10 and point["failures"] == 0, point
    assert TOKEN not in finished.output


def test_locust_users_load_over_tritons_own_grpc_tls(
    secured: tuple[str, Pki], tmp_path: Path
) -> None:
    """grpcs:// to tritonserver's --grpc-use-ssl: users and the statistics reads over TLS."""
    _, pki = secured
    repo = tmp_path / "repo"
    write_python_model(repo, "add_one")
    args = ServerArgs(
        repo,
        model_control_mode="none",
        startup_timeout_s=120,
        extra_args=certificates.grpc_tls_flags(pki),
    )
    with LocalLauncher().start(args) as server:
        env = subprocess_env(TRITON_TLS_CA=str(pki.ca))
        load = ("--headless", "-u", "2", "-r", "2", "-t", f"{LOAD_S}s")
        host = ("--host", f"grpcs://{server.endpoints.grpc}")
        run = run_locust(LOCUSTFILE, *load, *host, tmp_path=tmp_path, env=env, timeout=120)
    assert run.code == 0, run.tail()
    assert run.report is not None
    measured = run.report["measured"]
    assert measured["requests"] > 0 and measured["failures"] == 0, run.tail()
    (served,) = run.report["server"]
    assert measured["requests"] <= served["success_count"] <= measured["requests"] + 2


def test_the_metrics_url_follows_the_hosts_tls() -> None:
    """Triton's port convention (HTTP + 2) keeps the host's scheme; a URL given is kept."""
    config = resolve()
    assert metrics_url(config, None, "https://127.0.0.1:8443") == "https://127.0.0.1:8445/metrics"
    assert metrics_url(config, None, "http://127.0.0.1:8000") == "http://127.0.0.1:8002/metrics"
    assert metrics_url(config, "127.0.0.1:9", None) == "http://127.0.0.1:9/metrics"
    given = config.with_overrides({"metrics_url": "https://ingress.test/triton/metrics"})
    assert metrics_url(given, None, "https://127.0.0.1:1") == "https://ingress.test/triton/metrics"
    assert metrics_security(given, "https://ingress.test/metrics").tls
    assert not metrics_security(given, "http://127.0.0.1:8002/metrics").tls


def test_the_scrape_sends_the_token_over_tls(
    deployed: tuple[str, str, Pki],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The scraper through the metrics ingress: with the CA and the token it reads Triton's
    metrics; without the token it is refused, and says so without any header value."""
    _, metrics, pki = deployed
    monkeypatch.setenv("INGRESS_TOKEN", TOKEN)
    header = (("Authorization", "Bearer ${INGRESS_TOKEN}"),)
    url = f"https://{metrics}/metrics"
    with_token = Scraper(url, None, Security(True, ca_file=str(pki.ca), headers=header))
    with_token.scrape()
    assert with_token.errors == [] and len(with_token.samples) == 1
    assert "nv_inference_request_success" in with_token.samples[0].metrics
    caplog.set_level(logging.WARNING, "pytest_triton.load")
    wrong = Security(True, ca_file=str(pki.ca), headers=(("Authorization", "Bearer nope"),))
    refused = Scraper(url, None, wrong)
    refused.scrape()
    assert refused.samples == [] and "HTTP 401" in refused.errors[0], refused.errors
    wrong_ca = Scraper(url, None, Security(True, ca_file=str(pki.other_ca), headers=header))
    wrong_ca.scrape()
    assert "certificate" in wrong_ca.errors[0].lower(), wrong_ca.errors
    assert "cannot scrape" in caplog.text and TOKEN not in caplog.text and "nope" not in caplog.text


def test_a_soak_scrapes_through_the_tls_ingress(
    deployed: tuple[str, str, Pki], tmp_path: Path
) -> None:
    """--triton-soak against a deployed service: the master's scrape carries the CA and the
    token like the users' requests."""
    ingress, metrics, pki = deployed
    args = (
        *("--headless", "-u", "1", "-r", "1", "-t", "4s", "--host", f"https://{ingress}"),
        *("--triton-soak", "--triton-metrics-url", f"https://{metrics}/metrics"),
    )
    run = run_locust(LOCUSTFILE, *args, tmp_path=tmp_path, env=secure_env(pki))
    assert run.code == 0, run.tail()
    assert run.report is not None and run.report["soak"] is not None, run.tail()
    samples = run.report["soak"]["samples"]
    assert len(samples) >= 2, run.tail()
    assert samples[-1]["nv_inference_request_success"] > 0, samples[-1]
    assert "cannot scrape" not in run.output and TOKEN not in run.output
