"""TLS and request headers on every path of TritonClient, against real TLS peers:
Triton's own gRPC TLS (--grpc-use-ssl, and mutual TLS), Debian's nginx terminating TLS in
front of HTTP and refusing requests without the token, and Triton's own header check on both
protocols (--grpc-restricted-protocol, --http-restricted-api). Certificates are made here with
openssl; a CA that signed nothing of ours stands in for the wrong one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pytest_triton import TritonClient
from pytest_triton.base.errors import ConfigError, InferenceError, ServerError, TritonTestError
from pytest_triton.base.security import Security, parse_header
from pytest_triton.base.urls import Endpoints
from pytest_triton.client.triton_client import Protocol
from pytest_triton.server import LocalLauncher, ServerArgs
from tests.helpers import certificates, nginx
from tests.helpers.certificates import Pki, make_pki
from tests.helpers.raw_models import write_python_model

pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(certificates.OPENSSL is None, reason=certificates.MISSING),
]
X = {"X": np.arange(8, dtype=np.float32).reshape(2, 4)}
TOKEN_VARIABLE = "PYTEST_TRITON_TEST_TOKEN"
TOKEN = "s3cr3t-t0ken-value"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tls-repo")
    write_python_model(root, "add_one")
    return root


def tls_args(repo: Path, pki: Pki, *, mutual: bool) -> ServerArgs:
    return ServerArgs(
        repo,
        model_control_mode="none",
        startup_timeout_s=120,
        extra_args=certificates.grpc_tls_flags(pki, mutual=mutual),
    )


@pytest.fixture(scope="module")
def grpc_tls(repo: Path, pki: Pki) -> Iterator[str]:
    with LocalLauncher().start(tls_args(repo, pki, mutual=False)) as server:
        yield server.endpoints.grpc


@pytest.fixture(scope="module")
def grpc_mutual(repo: Path, pki: Pki) -> Iterator[str]:
    with LocalLauncher().start(tls_args(repo, pki, mutual=True)) as server:
        yield server.endpoints.grpc


def check(client: TritonClient) -> None:
    """Control, statistics and both inference paths (one request, several in flight)."""
    assert client.is_server_ready() and client.is_model_ready("add_one")
    assert client.model_config("add_one")["name"] == "add_one"
    np.testing.assert_array_equal(client.infer("add_one", X)["Y"], X["X"] + 1)
    answers = client.infer_many("add_one", [X, X, X])
    assert all(np.array_equal(a["Y"], X["X"] + 1) for a in answers)
    assert client.statistics("add_one")["model_stats"][0]["name"] == "add_one"


def test_grpc_over_tls_on_every_path(grpc_tls: str, pki: Pki) -> None:
    with TritonClient(grpc_tls, "grpc", security=Security(True, ca_file=str(pki.ca))) as client:
        check(client)
        # the direct HTTP/2 path (ALPN h2 over TLS) and the channel answer alike
        request = client.prepare("add_one", X)
        try:
            assert client.send_status(request) > 0  # the answer's size
        finally:
            request.release()


def test_grpc_server_name_override(grpc_tls: str, pki: Pki) -> None:
    """The certificate names triton.test; reaching it by another host name needs the
    override, as behind an ingress whose address is not the certificate's name."""
    security = Security(True, ca_file=str(pki.ca), server_name="triton.test")
    with TritonClient(grpc_tls, "grpc", security=security) as client:
        check(client)


def test_mutual_tls_needs_the_client_certificate(grpc_mutual: str, pki: Pki) -> None:
    mutual = Security(
        True, ca_file=str(pki.ca), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
    )
    with TritonClient(grpc_mutual, "grpc", security=mutual) as client:
        check(client)
    with (
        TritonClient(grpc_mutual, "grpc", security=Security(True, ca_file=str(pki.ca))) as bare,
        pytest.raises(TritonTestError),
    ):
        bare.infer("add_one", X)


def test_a_wrong_ca_fails_clearly(grpc_tls: str, pki: Pki) -> None:
    wrong = Security(True, ca_file=str(pki.other_ca))
    with (
        TritonClient(grpc_tls, "grpc", security=wrong) as client,
        pytest.raises(TritonTestError) as raised,
    ):
        client.infer("add_one", X)
    assert "certificate" in str(raised.value).lower() or "ssl" in str(raised.value).lower()


def test_security_refuses_half_of_mutual_tls_and_missing_files(pki: Pki) -> None:
    with pytest.raises(ConfigError, match="needs both a client certificate and its key"):
        Security(True, cert_file=str(pki.client_cert))
    with pytest.raises(ConfigError, match="does not exist"):
        Security(True, ca_file="/no/such/ca.pem")
    with pytest.raises(ConfigError, match="'Name: value'"):
        parse_header("Authorization Bearer x")


# -- Triton itself wanting a header on gRPC and HTTP -------------------------------------
GATE_HEADER = "X-Gate-Key"
GATE_KEY = "g4te-k3y-value"
GRPC_PREFIX = "triton-grpc-protocol-"  # what --grpc-restricted-protocol's key is checked as
RESTRICTED = "inference,model-config,model-repository,statistics"


@pytest.fixture(scope="module")
def restricted(repo: Path) -> Iterator[Endpoints]:
    """Explicit model control, nothing loaded at start: loading, configs, inference and
    statistics want the header on both protocols (health and metadata stay open, so readiness
    is seen without it)."""
    rule = f"{RESTRICTED}:{GATE_HEADER.lower()}={GATE_KEY}"
    args = ServerArgs(
        repo,
        model_control_mode="explicit",
        startup_timeout_s=120,
        extra_args=(f"--grpc-restricted-protocol={rule}", f"--http-restricted-api={rule}"),
    )
    with LocalLauncher().start(args) as server:
        yield server.endpoints


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_request_headers_reach_tritons_restricted_apis(
    restricted: Endpoints, protocol: Protocol, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header, its value from the environment, on control, repository, statistics and
    every inference path; a client without it is refused with the server's reason."""
    monkeypatch.setenv(TOKEN_VARIABLE, GATE_KEY)
    url = restricted.url(protocol)
    # Triton expects the gRPC header under its protocol prefix: both go on every call
    value = f"${{{TOKEN_VARIABLE}}}"
    security = Security(headers=((GATE_HEADER, value), (GRPC_PREFIX + GATE_HEADER, value)))
    with TritonClient(url, protocol, security=security) as client:
        client.load_model("add_one")  # model-repository
        check(client)
        request = client.prepare("add_one", X)
        try:
            assert client.send_status(request) > 0  # the hand-written HTTP/1.1 and HTTP/2 paths
        finally:
            request.release()
    with TritonClient(url, protocol) as bare:
        for call in (
            lambda: bare.infer("add_one", X),
            lambda: bare.statistics("add_one"),
            lambda: bare.load_model("add_one"),
        ):
            with pytest.raises(TritonTestError) as raised:
                call()
            message = str(raised.value)
            assert "the server refused the call without its header" in message, message
            assert "is restricted" in message and GATE_HEADER.lower() in message, message
            assert GATE_KEY not in message


# -- nginx terminating TLS in front of HTTP, wanting a token -----------------------------
@pytest.fixture(scope="module")
def ingress(repo: Path, pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if nginx.NGINX is None:
        pytest.skip(nginx.MISSING)
    certificate = (pki.server_cert, pki.server_key)
    prefix = tmp_path_factory.mktemp("nginx-tls")
    with nginx.deployed_behind_tls(repo, certificate, TOKEN, prefix) as hostport:
        yield hostport


def test_http_through_a_tls_ingress_with_a_token(
    ingress: str, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_VARIABLE, TOKEN)
    security = Security(
        True,
        ca_file=str(pki.ca),
        headers=(("Authorization", f"Bearer ${{{TOKEN_VARIABLE}}}"),),
    )
    assert TOKEN not in repr(security) and TOKEN not in str(security.described())
    with TritonClient(ingress, "http", security=security) as client:
        check(client)


def test_the_ingress_refuses_a_request_without_the_token(ingress: str, pki: Pki) -> None:
    with (
        TritonClient(ingress, "http", security=Security(True, ca_file=str(pki.ca))) as client,
        pytest.raises((InferenceError, ServerError, TritonTestError)) as raised,
    ):
        client.infer("add_one", X)
    assert "401" in str(raised.value) or "Unauthorized" in str(raised.value)


# -- the pytest front end: options, a deployed gate through the ingress, nothing printed ---
CONFTEST = """
from pytest_triton import factories
from tests.helpers.tiny_models import scorer_spec

triton_repository = factories.repository(
    [scorer_spec(formats=["torchscript-trace"], triton_name="scorer")]
)
"""


@pytest.fixture(scope="module")
def scorer_ingress(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The scorer deployed (model control none) behind nginx with TLS and the token."""
    if nginx.NGINX is None:
        pytest.skip(nginx.MISSING)
    from pytest_triton.base.server_offer import ServerTarget
    from pytest_triton.repository.builder import Repository
    from tests.helpers.tiny_models import scorer_spec

    root = tmp_path_factory.mktemp("scorer-repo")
    repo = Repository(root, [scorer_spec(formats=["torchscript-trace"], triton_name="scorer")])
    repo.plan(ServerTarget())
    repo.ensure_all()
    certificate = (pki.server_cert, pki.server_key)
    prefix = tmp_path_factory.mktemp("nginx-gate")
    with nginx.deployed_behind_tls(root, certificate, TOKEN, prefix) as hostport:
        yield hostport


def test_the_gate_runs_through_a_tls_ingress_and_never_prints_the_token(
    pytester: pytest.Pytester, scorer_ingress: str, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_VARIABLE, TOKEN)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_gate="""
def test_parity(triton_model, triton_client):
    triton_model.assert_parity(triton_client, batch_size=4)
    print(triton_client.security)
"""
    )
    common = [
        "-p",
        "no:cacheprovider",
        "-s",
        "-v",
        "--triton-url",
        f"https://{scorer_ingress}",
        "--triton-deployed",
        "--triton-protocol",
        "http",
        "--triton-headers",
        f"Authorization: Bearer ${{{TOKEN_VARIABLE}}}",
    ]
    good = pytester.runpytest_subprocess(*common, "--triton-tls-ca", str(pki.ca), timeout=300)
    good.assert_outcomes(passed=1)
    assert TOKEN not in good.stdout.str() + good.stderr.str()
    wrong = pytester.runpytest_subprocess(
        *common, "--triton-tls-ca", str(pki.other_ca), timeout=300
    )
    assert wrong.ret != 0
    said = wrong.stdout.str() + wrong.stderr.str()
    assert f"TLS certificate verification failed for https://{scorer_ingress}" in said, said
    assert "--triton-tls-ca" in said and "unreachable" not in said
