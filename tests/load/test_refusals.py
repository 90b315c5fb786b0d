"""Refusals said at once, by every front end: Debian's nginx terminating TLS and wanting a
token in front of a real tritonserver (model control none), and a missing token, a wrong
token and a CA that signed nothing of ours. pytest, Locust and triton-perf each stop within
seconds, naming the HTTP status or the TLS reason, the URL as given and the option that fixes
it; the run they would have made (a minute of load) never starts."""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import RefusedError
from pytest_triton.base.security import Security
from pytest_triton.client import refusals
from pytest_triton.load.preflight import targets
from tests.helpers import certificates, nginx
from tests.helpers.certificates import Pki, make_pki
from tests.helpers.locust_runs import (
    REPO,
    Finished,
    Locust,
    free_port,
    get_json,
    locust_args,
    subprocess_env,
    triton_perf_args,
)
from tests.helpers.raw_models import write_python_model

pytestmark = [
    pytest.mark.load,
    pytest.mark.triton,
    pytest.mark.skipif(certificates.OPENSSL is None, reason=certificates.MISSING),
    pytest.mark.skipif(nginx.NGINX is None, reason=nginx.MISSING),
]
LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "add_one.py"
TOKEN = "refusal-t0ken"
FAST_S = 10.0  # a refusal is said within this long of the front end starting its work
RUN_S = 60  # what each run would last if it did not stop at once
NEEDS_TOKEN = "--triton-headers 'Authorization: Bearer ${TOKEN}'"
WRONG_TOKEN = "the headers sent (Authorization) were refused"
UNVERIFIED = "TLS certificate verification failed"
CASES = {  # case: (what the output must say, besides the URL)
    "missing token": ("HTTP 401 Unauthorized", NEEDS_TOKEN),
    "wrong token": ("HTTP 401 Unauthorized", WRONG_TOKEN),
    "wrong CA": (UNVERIFIED, "--triton-tls-ca"),
}


@dataclasses.dataclass(frozen=True)
class Ingress:
    hostport: str
    pki: Pki

    @property
    def url(self) -> str:
        return f"https://{self.hostport}"

    def env(self, case: str) -> dict[str, str]:
        """TRITON_* settings of one case: the token, a wrong one or none; the CA or another."""
        extra = {
            "TRITON_TLS_CA": str(self.pki.other_ca if case == "wrong CA" else self.pki.ca),
            "TRITON_PROTOCOL": "http",
        }
        if case != "missing token":
            extra["TRITON_HEADERS"] = "Authorization: Bearer ${INGRESS_TOKEN}"
            extra["INGRESS_TOKEN"] = "wrong" if case == "wrong token" else TOKEN
        return subprocess_env(**extra)


@pytest.fixture(scope="module")
def ingress(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ingress]:
    """add_one served as deployed behind nginx with TLS and the token."""
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    root = tmp_path_factory.mktemp("repo")
    write_python_model(root, "add_one")  # nothing is ever asked of it: the refusal comes first
    certificate = (pki.server_cert, pki.server_key)
    prefix = tmp_path_factory.mktemp("nginx")
    with nginx.deployed_behind_tls(root, certificate, TOKEN, prefix) as hostport:
        yield Ingress(hostport, pki)


def assert_names_the_cause(output: str, case: str, url: str, option: str) -> None:
    said, fix = CASES[case]
    assert said in output and fix in output, f"{case}:\n{output[-3000:]}"
    assert f"{url} ({option})" in output, f"{case}: the URL as given:\n{output[-3000:]}"
    assert "unreachable" not in output and "model '-'" not in output, output[-3000:]
    assert TOKEN not in output


PYTEST_CONFTEST = """
import os
from pytest_triton import factories

missing_token = factories.server(headers=(), scope="function")
wrong_token = factories.server(headers=("Authorization: Bearer wrong",), scope="function")
wrong_ca = factories.server(tls_ca=os.environ["OTHER_CA"], scope="function")
polling_repository = factories.repository([])
polling = factories.server(
    repository="polling_repository", launcher="local", model_control="poll", deployed=False
)
"""
PYTEST_TESTS = """
def test_missing_token(missing_token):
    pass

def test_wrong_token(wrong_token):
    pass

def test_wrong_ca(wrong_ca):
    pass

def test_with_the_token(triton_client):
    assert triton_client.is_server_ready()

def test_the_docs_server_args_form_starts_a_polling_server(polling, triton_config):
    import psutil
    assert triton_config.server.server_args == ("--repository-poll-secs=1",)
    command = psutil.Process(polling.server.process.pid).cmdline()
    assert "--repository-poll-secs=1" in command and "--model-control-mode=poll" in command
"""


def test_pytest_names_each_refusal_at_once(
    ingress: Ingress, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pytest run, --triton-deployed through the ingress with the CA and the token; three
    servers of its own refused three ways: each test errors at setup within seconds (not
    after --triton-startup-timeout), naming its cause; the server with the token answers.
    The same run gives `--triton-server-args "--repository-poll-secs=1"` as docs/load.md
    writes it (a value that begins with '--'): a local server of its own starts with it."""
    pytester.makeconftest(PYTEST_CONFTEST)
    pytester.makepyfile(PYTEST_TESTS)
    monkeypatch.setenv("OTHER_CA", str(ingress.pki.other_ca))
    monkeypatch.setenv("INGRESS_TOKEN", TOKEN)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-rE",
        "--durations=0",
        "-vv",
        "--triton-protocol=http",
        "--triton-url",
        ingress.url,
        "--triton-deployed",
        "--triton-startup-timeout=120",
        "--triton-tls-ca",
        str(ingress.pki.ca),
        "--triton-headers",
        "Authorization: Bearer ${INGRESS_TOKEN}",
        "--triton-server-args",
        "--repository-poll-secs=1",
        timeout=180,
    )
    output = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=2, errors=3)
    for case, test in (
        ("missing token", "test_missing_token"),
        ("wrong token", "test_wrong_token"),
        ("wrong CA", "test_wrong_ca"),
    ):
        assert f"ERROR at setup of {test} " in output, output[-3000:]
        setup = re.search(rf"([0-9.]+)s setup +\S*{test}\b", output)
        assert setup is not None and float(setup.group(1)) < FAST_S, output[-3000:]
        errors = [e for e in output.splitlines() if e.startswith("E ") and "RefusedError" in e]
        assert any(CASES[case][1] in e for e in errors), f"{case}:\n{output[-3000:]}"
    assert_names_the_cause(output, "missing token", ingress.url, "--triton-url")
    assert_names_the_cause(output, "wrong CA", ingress.url, "--triton-url")


def _stamp(line: str) -> datetime:
    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")


def _locust(ingress: Ingress, case: str, tmp_path: Path) -> Locust:
    load = ("--headless", "-u", "2", "-r", "2", "-t", f"{RUN_S}s", "--host", ingress.url)
    return Locust(locust_args(LOCUSTFILE, *load), None, ingress.env(case))


def _locust_web_ui(ingress: Ingress, case: str, port: int) -> Locust:
    """A run started from the web UI (--autostart: as if its Start button was pressed)."""
    load = ("--autostart", "-u", "2", "-r", "2", "-t", f"{RUN_S}s", "--host", ingress.url)
    web = ("--web-host", "127.0.0.1", "--web-port", str(port))
    return Locust(locust_args(LOCUSTFILE, *load, *web), None, ingress.env(case))


def _perf(ingress: Ingress, case: str, tmp_path: Path) -> Locust:
    cmd = [
        *triton_perf_args("tests.helpers.probe_models:probe_spec"),
        "--url",
        ingress.url,
        "--model-name",
        "add_one",
        "--concurrency-range",
        "2",
        "-p",
        str(RUN_S * 1000),
        "--no-progress",
        "--json",
        str(tmp_path / f"{case.replace(' ', '-')}.json"),
    ]
    return Locust(cmd, None, ingress.env(case))


def _tune(ingress: Ingress, case: str, tmp_path: Path) -> Locust:
    cmd = [
        sys.executable,
        "-m",
        "pytest_triton.cli.triton_tune",
        "-m",
        "tests.helpers.probe_models:probe_spec",
        "--triton-url",
        ingress.url,
        "-o",
        str(tmp_path / "tune"),
    ]
    return Locust(cmd, None, ingress.env(case))


def test_locust_and_triton_perf_stop_before_any_load(ingress: Ingress, tmp_path: Path) -> None:
    """Each refusal, Locust and triton-perf (and triton-tune, without the token): their one
    preflight request is refused, so they exit with status 2 within seconds of starting (a
    minute of load was asked for), no user spawned, no sweep point measured and nothing
    exported, naming the cause and the option. A run started from the web UI is stopped as
    fast, and its Triton tab says why."""
    started = time.monotonic()
    runs = {
        (front, case): make(ingress, case, tmp_path)
        for front, make in (("locust", _locust), ("perf", _perf))
        for case in CASES
    }  # all at once: most of their time is importing
    runs["tune", "missing token"] = _tune(ingress, "missing token", tmp_path)
    web_port = free_port()
    web_ui = _locust_web_ui(ingress, "missing token", web_port)
    assert_the_web_ui_shows_the_refusal(web_ui, web_port, ingress.url)
    finished: dict[tuple[str, str], Finished] = {
        key: run.finish(timeout=RUN_S + 60) for key, run in runs.items()
    }
    for (front, case), done in finished.items():
        output = done.output
        assert done.code == 2, f"{front}, {case}: {done.tail()}"
        option = {"locust": "--host", "perf": "--url", "tune": "--triton-url"}[front]
        assert_names_the_cause(output, case, ingress.url, option)
        if front == "locust":
            lines = output.splitlines()
            start = _stamp(next(line for line in lines if "Starting Locust" in line))
            refused = _stamp(next(line for line in lines if "pytest-triton: " in line))
            assert (refused - start).total_seconds() < FAST_S, done.tail()
            assert "Ramping to" not in output and "Spawning" not in output, done.tail()
        elif front == "perf":
            assert not (tmp_path / f"{case.replace(' ', '-')}.json").exists(), done.tail()
        else:
            assert not (tmp_path / "tune").exists() and "export" not in output, done.tail()
    # seven processes importing torch on a shared machine: the bound only says that no run
    # lasted the minute of load it was given
    assert time.monotonic() - started < RUN_S, [f.wall_s for f in finished.values()]


def assert_the_web_ui_shows_the_refusal(run: Locust, port: int, url: str) -> None:
    """The web UI stays up (its person reads why there), the run is stopped within seconds of
    the web UI's start, no request was answered, and the Triton tab says why."""
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + RUN_S
    try:
        stats = None
        while time.monotonic() < deadline and run.proc.poll() is None:
            stats = get_json(f"{base}/stats/requests")
            if stats and stats["state"] == "stopped":
                break
            time.sleep(0.2)
        assert stats is not None and stats["state"] == "stopped", run.stderr_so_far[-3000:]
        lines = run.stderr_so_far.splitlines()
        start = _stamp(next(line for line in lines if "Starting web interface" in line))
        stopped = _stamp(next(line for line in lines if "stopping the test" in line))
        assert (stopped - start).total_seconds() < FAST_S, run.stderr_so_far[-3000:]
        total = next(s for s in stats["stats"] if s["name"] == "Aggregated")
        assert total["num_requests"] == total["num_failures"], total
        (row,) = stats["extended_stats"][0]["data"]
        assert row["status"] == "REFUSED", row
        assert_names_the_cause(row["value"], "missing token", url, "--host")
        live = get_json(f"{base}/triton/live.json")
        assert live is not None and live["state"] == "refused" and live["refusal"] == row["value"]
    finally:
        run.kill()


def test_a_guessed_grpc_port_that_is_closed_names_the_option() -> None:
    """--host http://H:P guesses gRPC at P + 1: refused there, the message says so and names
    --triton-grpc-url; a given gRPC URL is named as given."""
    port = free_port()
    config = resolve().with_overrides({"protocol": ("grpc",)})
    (guessed,) = targets(f"http://127.0.0.1:{port}", "--host", ["grpc"], config)
    assert guessed.derived and guessed.hostport == f"127.0.0.1:{port + 1}"
    with pytest.raises(RefusedError) as refused:
        refusals.raise_if_refused(guessed)
    text = str(refused.value)
    assert "connection refused" in text and "--triton-grpc-url" in text, text
    assert f"guessed from --host http://127.0.0.1:{port}" in text, text
    given = config.with_overrides({"grpc_url": f"grpc://127.0.0.1:{port}"})
    (named,) = targets(f"http://127.0.0.1:{port}", "--host", ["grpc"], given)
    assert not named.derived and named.option == "--triton-grpc-url"
    answer = refusals.probe(named)
    assert answer.refusal is not None and f"grpc://127.0.0.1:{port} (--triton-grpc-url)" in (
        answer.refusal
    )


def test_plain_http_to_the_tls_ingress_says_https(ingress: Ingress) -> None:
    """http:// where the ingress speaks TLS: nginx's 400 becomes 'write https://'."""
    target = refusals.Target(
        f"http://{ingress.hostport}", "--triton-url", "http", ingress.hostport, Security()
    )
    answer = refusals.probe(target)
    assert answer.refusal is not None and "write https://" in answer.refusal, answer
