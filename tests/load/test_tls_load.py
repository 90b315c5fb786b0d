"""Locust users through a TLS ingress that wants a token (Debian's nginx in
front of a real tritonserver, certificates made by the test): requests counted by the server
equal the report's, the token never printed, and without it every request fails."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_triton.base.server_offer import ServerTarget
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
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Pki]]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    root = tmp_path_factory.mktemp("repo")
    write_python_model(root, "add_one")
    spec = dataclasses.replace(probe_spec(), formats=("torchscript-trace",), triton_name="probe")
    probe = Repository(root, [spec])
    probe.plan(ServerTarget())
    probe.ensure_all()
    certificate = (pki.server_cert, pki.server_key)
    prefix = tmp_path_factory.mktemp("nginx")
    with nginx.deployed_behind_tls(root, certificate, TOKEN, prefix) as ingress:
        yield ingress, pki


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
