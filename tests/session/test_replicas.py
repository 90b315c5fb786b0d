"""--triton-replicas: behind a load balancer each statistics call answers from one replica,
so batching proofs and request counts sum over the replicas named, with a table of how the
load spread. Two real tritonservers behind Debian's nginx, round-robin."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pytest_triton import TritonClient, assert_dynamic_batching
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.client.stats import StatsWindow, replica_table
from pytest_triton.repository.builder import Repository
from pytest_triton.server import LocalLauncher, ServerArgs
from tests.helpers import nginx
from tests.helpers.locust_runs import REPO, Locust, run_locust, triton_perf_args
from tests.helpers.tiny_models import scorer_inputs, scorer_spec

pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(nginx.NGINX is None, reason=nginx.MISSING),
]
REQUESTS = 16


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """Two replicas serving the same scorer (dynamic batching, 50 ms queue delay) and nginx
    in front: yields nginx's HOST:PORT and the replicas' HTTP HOST:PORTs."""
    root = tmp_path_factory.mktemp("replica-repo")
    repo = Repository(root, [scorer_spec(formats=["torchscript-trace"], triton_name="scorer")])
    repo.plan(ServerTarget())
    repo.ensure_all()
    args = ServerArgs(root, model_control_mode="none", startup_timeout_s=120)
    with LocalLauncher().start(args) as one, LocalLauncher().start(args) as two:
        replicas = [one.endpoints.http, two.endpoints.http]
        with nginx.round_robin(replicas, tmp_path_factory.mktemp("nginx")) as ingress:
            yield ingress, replicas


def test_statistics_sum_over_replicas_and_match_the_clients_count(
    replicated: tuple[str, list[str]],
) -> None:
    ingress, replicas = replicated
    rows = scorer_inputs(REQUESTS, seed=3)
    singles = [{n: t[i : i + 1].numpy() for n, t in rows.items()} for i in range(REQUESTS)]
    with TritonClient(ingress, "http") as client:
        stats_clients = [TritonClient(url, "http") for url in replicas]
        try:
            with StatsWindow(
                client, "scorer", expect_requests=REQUESTS, replicas=stats_clients
            ) as window:
                answers = client.infer_many("scorer", singles)
        finally:
            for c in stats_clients:
                c.close()
    assert len(answers) == REQUESTS and all(np.isfinite(a["score"]).all() for a in answers)
    assert window.delta.requests == REQUESTS  # the client's own count
    assert set(window.per_replica) == set(replicas)
    assert all(s.requests > 0 for s in window.per_replica.values()), replica_table(
        window.per_replica
    )
    assert_dynamic_batching(window.delta)
    table = replica_table(window.per_replica)
    rows = table.splitlines()[2:]
    assert sorted(row.split(" | ")[0].removeprefix("| ") for row in rows) == sorted(replicas), table


CONFTEST = """
from pytest_triton import factories
from tests.helpers.tiny_models import scorer_spec

triton_repository = factories.repository(
    [scorer_spec(formats=["torchscript-trace"], triton_name="scorer")]
)
"""


def test_the_batching_proof_sums_over_replicas_in_deployed_mode(
    pytester: pytest.Pytester, replicated: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    ingress, replicas = replicated
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # tests.helpers
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_gate=f"""
from pytest_triton import assert_dynamic_batching
from pytest_triton.client.stats import replica_table

def test_batching(triton_model, triton_client):
    delta = triton_model.assert_batched_parity(triton_client, requests={REQUESTS})
    assert_dynamic_batching(delta)
    assert delta.requests == {REQUESTS}
    spread = triton_model.replica_spread
    print(replica_table(spread))
    assert len(spread) == 2 and sum(s.requests for s in spread.values()) == {REQUESTS}
"""
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-s",
        "--triton-url",
        f"http://{ingress}",
        "--triton-deployed",
        "--triton-protocol",
        "http",
        "--triton-replicas",
        ",".join(f"http://{r}" for r in replicas),
        timeout=300,
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*| replica | requests | share | executions | avg batch |"])


def test_replicas_need_the_services_address(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--triton-replicas", "http://127.0.0.1:1"
    )
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--triton-replicas names the replicas*--triton-url*"])


def test_locusts_server_report_sums_over_replicas(
    replicated: tuple[str, list[str]], tmp_path: Path
) -> None:
    """Locust through the balancer: the server report is the replicas' sum, with each one's
    share, and counts what the client counted."""
    ingress, replicas = replicated
    users = 4
    run = run_locust(
        REPO / "tests" / "helpers" / "locustfiles" / "scorer.py",
        "--headless",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        "4s",
        "--host",
        f"http://{ingress}",
        "--triton-replicas",
        ",".join(f"http://{r}" for r in replicas),
        tmp_path=tmp_path,
    )
    assert run.code == 0, run.tail()
    assert run.report is not None
    (server,) = run.report["server"]
    requests = run.report["measured"]["requests"]
    spread = server["replicas"]
    assert set(spread) == set(replicas), spread
    assert all(r["success_count"] > 0 for r in spread.values()), spread
    assert sum(r["success_count"] for r in spread.values()) == server["success_count"]
    assert 0 <= server["success_count"] - requests <= users, run.tail()
    assert "Load over the replicas" in run.output


def test_triton_perfs_server_breakdown_sums_over_replicas(
    replicated: tuple[str, list[str]], tmp_path: Path
) -> None:
    """triton-perf through the balancer: the server's figures of a point are the replicas'
    sum (each one served part of it), not one replica's answer."""
    ingress, replicas = replicated
    concurrency = 4
    out = tmp_path / "perf.json"
    cmd = [
        *triton_perf_args("tests.helpers.tiny_models:scorer_spec"),
        "--url",
        f"http://{ingress}",
        "--model-name",
        "scorer",
        "--concurrency-range",
        str(concurrency),
        "-p",
        "1500",
        "--warmup",
        "300",
        "--triton-replicas",
        ",".join(f"http://{r}" for r in replicas),
        "--json",
        str(out),
        "--no-progress",
    ]
    finished = Locust(cmd).finish(timeout=120)
    assert finished.code == 0, finished.tail()
    (point,) = json.loads(out.read_text())["points"]
    spread = point["server_replicas"]
    assert set(spread) == set(replicas), spread
    assert all(r["success_count"] > 0 for r in spread.values()), spread
    assert sum(r["success_count"] for r in spread.values()) == point["server_requests"]
    # the measured windows are part of the span the statistics cover: one replica alone would
    # have counted about half of them
    assert point["server_requests"] >= point["requests"] - concurrency, point
    assert point["server_avg_batch"] > 1, point  # the batcher combined requests on both
    assert "Load over the replicas" in finished.output


def test_triton_perf_refuses_replicas_without_the_services_address() -> None:
    cmd = [
        *triton_perf_args("tests.helpers.tiny_models:scorer_spec"),
        "--triton-replicas",
        "http://127.0.0.1:1",
        "--no-progress",
    ]
    finished = Locust(cmd).finish(timeout=60)
    assert finished.code == 2, finished.tail()
    assert "--triton-replicas names the replicas" in finished.output
    assert "give that address with --url" in finished.output
