"""Locust master and workers on separate machines: hosts built as network namespaces here (a
master, two workers, and a server host), load only to addresses inside them.

- The report's request count equals the server's, with one worker's wall clock 30 s behind
  (libfaketime): windows are cut on the master's clock, so no request lands outside the run.
- An embedded server serves remote workers on the address the master names.
- Without that address, workers on other machines refuse at once and the master says why.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import netns
from tests.helpers.locust_runs import (
    PROBE_LOCUSTFILE,
    REPO,
    Finished,
    Locust,
    locust_args,
    subprocess_env,
)

PROBLEM = netns.problem()
pytestmark = [pytest.mark.triton, pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM))]
MASTER_PORT = "5557"
SKEW_S = -30
USERS = 8


@pytest.fixture
def hosts() -> Iterator[dict[str, netns.Host]]:
    with netns.hosts("master", "w1", "w2", "server") as built:
        yield built
    assert not [n for n in netns.ours() if n.startswith(next(iter(built.values())).netns[:-7])]


def worker(host: netns.Host, master: netns.Host, **env: str) -> Locust:
    args = locust_args(
        PROBE_LOCUSTFILE, "--worker", "--master-host", master.address, "--master-port", MASTER_PORT
    )
    return Locust(host.command(*args), env=subprocess_env(**env))


def master_run(master: netns.Host, tmp_path: Path, *args: str, workers: int = 2) -> Locust:
    report = tmp_path / "report.json"
    cmd = locust_args(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        str(USERS),
        "-r",
        str(USERS),
        "-t",
        "10s",
        "--master",
        "--master-bind-host",
        master.address,
        "--master-bind-port",
        MASTER_PORT,
        "--expect-workers",
        str(workers),
        "--triton-format",
        "torchscript-trace",
        *args,
        report=report,
    )
    return Locust(master.command(*cmd), report)


@pytest.fixture
def probe_server(hosts: dict[str, netns.Host]) -> Iterator[tuple[str, str]]:
    """The probe model on the server host, started outside the runs under test: its HTTP
    host:port and model name."""
    host = hosts["server"]
    cmd = host.command(sys.executable, "-m", "tests.helpers.serve_probe", host.address)
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("SERVING"), f"the server host's server did not start: {line!r}"
        _, http, _grpc, model = line.split()
        yield http, model
    finally:
        proc.terminate()
        proc.wait(60)


def finish(master: Locust, workers: list[Locust]) -> Finished:
    done = master.finish(timeout=180)
    for w in workers:
        w_done = w.finish(timeout=60)
        assert w_done.code == 0, w_done.tail()
    return done


def test_master_and_workers_on_three_hosts_count_what_the_server_counts(
    hosts: dict[str, netns.Host], probe_server: tuple[str, str], tmp_path: Path
) -> None:
    if netns.FAKETIME_LIBRARY is None:
        pytest.skip(netns.FAKETIME_MISSING)
    http, model = probe_server
    master = master_run(
        hosts["master"],
        tmp_path,
        "--host",
        f"http://{http}",
        "--triton-allow-remote",
        "--triton-model",
        model,
        "--triton-load-warmup",
        "2000",
        "--triton-measurement-interval",
        "2000",
    )
    time.sleep(1)  # the master binds first
    skewed = worker(hosts["w2"], hosts["master"], **netns.skewed_clock(SKEW_S))
    workers = [worker(hosts["w1"], hosts["master"]), skewed]
    try:
        done = finish(master, workers)
    finally:
        if skewed.proc.poll() is None:
            skewed.kill()
        netns.remove_faketime_leftovers(skewed.proc.pid)
    assert not netns.faketime_leftovers(skewed.proc.pid), "libfaketime's leftovers not removed"
    assert done.code == 0, done.tail()
    report = done.report
    assert report is not None
    requests = report["measured"]["requests"]
    (server,) = report["server"]
    assert requests > 100 and report["measured"]["failures"] == 0
    # the server also answered the requests in flight when the users were stopped (at most
    # one per user), which Locust no longer counts
    assert 0 <= server["success_count"] - requests <= USERS, done.tail()
    # ... and the report says so: the difference named, not left for the reader to find
    assert server["client_success_count"] == requests, server
    assert server["in_flight_at_stop"] == server["success_count"] - requests, server
    if server["in_flight_at_stop"]:
        assert f"{server['in_flight_at_stop']} in flight when the users stopped" in done.output
    # the skewed worker's offset was measured, and none of its requests left the run
    offsets = sorted(o["offset_s"] for o in report["worker_clock_offsets"].values())
    assert len(offsets) == 2, report["worker_clock_offsets"]
    assert abs(offsets[0]) < 0.5 and abs(offsets[1] + SKEW_S) < 0.5, offsets
    assert report["requests_outside_run"] == 0
    windows = report["windows"]
    assert len(windows) >= 2 and all(w["requests"] > 0 for w in windows), windows
    assert "Worker clocks, offset to the master's" in done.output


def test_an_embedded_server_serves_remote_workers_on_the_named_address(
    hosts: dict[str, netns.Host], tmp_path: Path
) -> None:
    master_host = hosts["master"]
    master = master_run(master_host, tmp_path, "--triton-serve-address", master_host.address)
    master.wait_for("embedded server ready", timeout=120)
    workers = [worker(hosts["w1"], master_host), worker(hosts["w2"], master_host)]
    done = finish(master, workers)
    assert done.code == 0, done.tail()
    assert done.report is not None
    assert f"load goes to http://{master_host.address}:" in done.output
    (server,) = done.report["server"]
    requests = done.report["measured"]["requests"]
    assert requests > 100 and 0 <= server["success_count"] - requests <= USERS, done.tail()


def test_remote_workers_refuse_an_embedded_server_on_the_masters_loopback(
    hosts: dict[str, netns.Host], tmp_path: Path
) -> None:
    master_host = hosts["master"]
    master = master_run(master_host, tmp_path, workers=1)
    master.wait_for("embedded server ready", timeout=120)
    remote = worker(hosts["w1"], master_host)
    done = master.finish(timeout=60)
    remote.finish(timeout=60)
    assert done.code == 2, done.tail()
    assert "refused the run" in done.output
    assert "--triton-serve-address" in done.output
    assert done.wall_s < 60
