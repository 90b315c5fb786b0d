"""Answers checked under load, on real servers and real Locust runs: a model that answers
wrongly only when the dynamic batcher combines requests fails the run with the wrong answers
named (both protocols, system shared memory, the multiplexed users and users with a greenlet
of their own), the same model under one user passes, and the seed models pass. A replayed
trace's own batch sizes are checked too. triton-perf on the same server: wrong answers and a
server's error on some inputs each fail the sweep, counted by reason with the first example;
a point without a failure reports as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_triton.base.urls import Endpoints
from pytest_triton.server import LocalLauncher, ServerArgs
from tests.helpers.locust_runs import (
    LOCUSTFILES,
    PROBE_LOCUSTFILE,
    REPO,
    SHORT_PERF_POINT,
    Finished,
    Locust,
    run_locust,
    triton_perf_args,
)
from tests.helpers.probe_models import (
    CORRUPTED_INDEX,
    REFUSED_TEXT,
    write_raises_some,
    write_wrong_for_batches,
    write_wrong_when_batched,
)

RATE_LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "rate.py"
pytestmark = [pytest.mark.load, pytest.mark.triton]


@pytest.fixture(scope="module")
def wrong_when_batched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    root = tmp_path_factory.mktemp("repo")
    write_wrong_when_batched(root)
    write_wrong_for_batches(root)
    write_raises_some(root)
    with LocalLauncher().start(ServerArgs(root, model_control_mode="none")) as server:
        yield server.endpoints


def run(
    endpoints: Endpoints | None,
    *args: str,
    users: int,
    tmp_path: Path,
    locustfile: Path = PROBE_LOCUSTFILE,
    seconds: int = 5,
    timeout: float = 90,
) -> dict[str, Any]:
    host = (
        [
            "--host",
            f"http://{endpoints.http}",
            "--triton-grpc-url",
            f"grpc://{endpoints.grpc}",
            "--triton-model",
            "wrong_when_batched",
        ]
        if endpoints is not None
        else []
    )
    done = run_locust(
        locustfile,
        *args,
        "--headless",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{seconds}s",
        *host,
        tmp_path=tmp_path,
        timeout=timeout,
    )
    assert done.report is not None, done.tail()
    return {**done.report, "code": done.code, "output": done.output}


WRONG = [
    pytest.param(("--triton-protocol", "http"), id="http"),
    pytest.param(("--triton-protocol", "grpc"), id="grpc"),
    pytest.param(("--triton-protocol", "grpc", "--triton-shared-memory", "system"), id="grpc-shm"),
    pytest.param(("--triton-protocol", "http", "--triton-shared-memory", "system"), id="http-shm"),
]


@pytest.mark.parametrize("args", WRONG)
def test_wrong_answers_under_concurrency_fail_the_run(
    wrong_when_batched: Endpoints, args: tuple[str, ...], tmp_path: Path
) -> None:
    """8 users: the batcher combines their requests and the model corrupts one element of
    each answer. Every answer's values are compared (--triton-check-every 1)."""
    report = run(wrong_when_batched, *args, "--triton-check-every", "1", users=8, tmp_path=tmp_path)
    output = report["output"]
    assert report["code"] == 1, output[-3000:]
    wrong = report["wrong_answers"]
    assert wrong > 0 and report["measured"]["wrong_answers"] == wrong
    assert report["measured"]["failures"] >= wrong
    (check,) = [c for c in report["checks"] if c["name"] == "wrong_answers"]
    assert check["passed"] is False and check["measured"] == wrong
    assert "wrong answer: model 'wrong_when_batched'" in output, output[-3000:]
    assert f"worst at index {CORRUPTED_INDEX}" in output and "max abs diff 0.25" in output
    assert "RESULT: FAIL - " in output and "wrong_answers measured" in output
    # the failures by reason: every failed request here is a wrong answer, counted as such
    # among the answers checked, with the first one in full
    assert report["answers_checked"] >= wrong, report["answers_checked"]
    (reason,) = report["failure_reasons"]
    assert reason["kind"] == "wrong answer" and reason["count"] == report["measured"]["failures"]
    assert f"worst at index {CORRUPTED_INDEX}" in reason["example"]
    assert report["first_wrong_answer"] == reason["example"]
    assert "Failed requests by reason (whole run):" in output
    assert f"requests failed: {reason['count']:,} wrong answers" in output


def test_a_sample_of_answers_finds_them_too(wrong_when_batched: Endpoints, tmp_path: Path) -> None:
    """The default share on the multiplexed users: values compared on one answer in 10."""
    report = run(wrong_when_batched, "--triton-check-every", "10", users=8, tmp_path=tmp_path)
    assert report["code"] == 1 and report["wrong_answers"] > 0, report["output"][-3000:]
    requests = report["measured"]["requests"]
    assert report["wrong_answers"] <= requests / 10 + 8, report["output"][-3000:]


def test_users_with_a_greenlet_of_their_own_check_too(
    wrong_when_batched: Endpoints, tmp_path: Path
) -> None:
    """Paced users (Locust's constant_throughput) send from their own greenlets, not
    through the multiplexer."""
    report = run(
        wrong_when_batched,
        "PacedUser",
        "--triton-check-every",
        "1",
        users=8,
        tmp_path=tmp_path,
        locustfile=RATE_LOCUSTFILE,
    )
    assert report["code"] == 1 and report["wrong_answers"] > 0, report["output"][-3000:]
    assert "wrong answer: model 'wrong_when_batched'" in report["output"]


def test_one_user_gets_right_answers_from_the_same_model(
    wrong_when_batched: Endpoints, tmp_path: Path
) -> None:
    """No concurrency, no batches, no wrong answer: the check itself is right."""
    report = run(wrong_when_batched, "--triton-check-every", "1", users=1, tmp_path=tmp_path)
    assert report["code"] == 0, report["output"][-3000:]
    assert report["wrong_answers"] == 0 and report["measured"]["failures"] == 0
    assert report["answers_checked"] > 0 and report["failure_reasons"] == []
    assert "Failed requests by reason" not in report["output"]


def test_without_the_flag_a_host_is_not_checked(
    wrong_when_batched: Endpoints, tmp_path: Path
) -> None:
    """The locustfile's model need not be the deployed one: no check unless asked."""
    report = run(wrong_when_batched, users=8, tmp_path=tmp_path, seconds=3)
    assert report["code"] == 0 and report["wrong_answers"] == 0, report["output"][-3000:]
    assert "pass --triton-check-every N to check them" in report["output"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_probe_model_passes_on_its_own_server(protocol: str, tmp_path: Path) -> None:
    """The embedded server serves the locustfile's own spec: checked by default."""
    report = run(
        None, "--triton-protocol", protocol, "--triton-check-every", "1", users=8, tmp_path=tmp_path
    )
    assert report["code"] == 0, report["output"][-3000:]
    assert report["wrong_answers"] == 0 and report["measured"]["failures"] == 0
    assert report["measured"]["requests"] > 50
    assert "answers checked against PyTorch" in report["output"]


def test_dlrm_passes_under_load(tmp_path: Path) -> None:
    """A zoo model (DLRM, small) on its embedded server, values checked on every answer over
    system shared memory."""
    report = run(
        None,
        "--triton-check-every",
        "1",
        "--triton-shared-memory",
        "system",
        users=4,
        tmp_path=tmp_path,
        locustfile=LOCUSTFILES / "dlrm.py",
        seconds=8,
        timeout=180,
    )
    assert report["code"] == 0, report["output"][-3000:]
    assert report["wrong_answers"] == 0 and report["measured"]["failures"] == 0
    assert report["measured"]["requests"] > 10


def test_a_replayed_trace_s_batch_sizes_are_checked(
    wrong_when_batched: Endpoints, tmp_path: Path
) -> None:
    """A trace of 2 s of batch 1, then 2 s of batch 2, against a model wrong only for
    requests of several rows: the batch-2 stage fails with the wrong answers named, the
    batch-1 stage passes (every arrival's answer checked against its own reference)."""
    trace = tmp_path / "trace.csv"
    rows = [f"{i / 10:.2f},1" for i in range(20)] + [f"{2 + i / 10:.2f},2" for i in range(20)]
    trace.write_text("\n".join(rows) + "\n")
    done = run_locust(
        RATE_LOCUSTFILE,
        "OpenUser",
        "--headless",
        "-u",
        "1",
        "--host",
        f"http://{wrong_when_batched.http}",
        "--triton-model",
        "wrong_for_batches",
        "--triton-check-every",
        "1",
        "--triton-shape",
        "replay",
        "--triton-replay",
        str(trace),
        "--triton-shape-step-s",
        "2",
        tmp_path=tmp_path,
        timeout=90,
    )
    assert done.report is not None, done.tail()
    assert done.code == 1, done.tail()
    assert done.report["wrong_answers"] == pytest.approx(20, abs=1), done.tail()
    assert "wrong answer: model 'wrong_for_batches'" in done.output, done.tail()
    assert "max abs diff 0.25" in done.output
    first, second = done.report["stages"]
    assert first["passed"] and first["failures"] == 0, done.report["stages"]
    assert not second["passed"] and second["failures"] > 0, done.report["stages"]


def test_a_server_error_is_named_with_the_server_s_text(
    wrong_when_batched: Endpoints, tmp_path: Path
) -> None:
    """A model that answers an error to some inputs: the Locust run fails, its failures
    counted under the server's own text."""
    done = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "3s",
        "--host",
        f"http://{wrong_when_batched.http}",
        "--triton-model",
        "raises_some",
        tmp_path=tmp_path,
    )
    assert done.report is not None, done.tail()
    assert done.code == 1, done.tail()
    (reason,) = done.report["failure_reasons"]
    assert reason["kind"] == "server error" and REFUSED_TEXT in reason["text"], reason
    assert reason["count"] == done.report["measured"]["failures"] > 0
    assert f"server error: {reason['text']}" in done.output, done.tail()


# -- triton-perf on the same server --------------------------------------------------------


def perf(
    endpoints: Endpoints, model: str, concurrency: int, tmp_path: Path, *args: str
) -> tuple[Finished, dict[str, Any]]:
    """triton-perf against `model` on the module's server (the probe's spec makes its inputs
    and references); its finished process and its JSON."""
    out = tmp_path / "load-perf.json"
    done = Locust(
        [
            *triton_perf_args("tests.helpers.probe_models:probe_spec"),
            "--url",
            f"http://{endpoints.http}",
            "--model-name",
            model,
            "--concurrency-range",
            str(concurrency),
            "--json",
            str(out),
            *SHORT_PERF_POINT,
            *args,
        ]
    ).finish(120)
    return done, json.loads(out.read_text()) if out.exists() else {}


def test_triton_perf_fails_on_wrong_answers_naming_them(
    wrong_when_batched: Endpoints, tmp_path: Path
) -> None:
    """8 users, every answer checked: the point's answers checked and wrong are the real
    counts, its failures are all wrong answers (per point and per window), the first one
    named in full, and the sweep exits 1."""
    done, document = perf(
        wrong_when_batched, "wrong_when_batched", 8, tmp_path, "--check-every", "1"
    )
    assert done.code == 1, done.tail()
    (point,) = document["points"]
    wrong = point["wrong_answers"]
    assert wrong > 0 and point["answers_checked"] >= wrong, point
    (reason,) = point["failure_reasons"]
    assert reason["kind"] == "wrong answer" and reason["count"] == wrong == point["total_failures"]
    assert f"worst at index {CORRUPTED_INDEX}" in point["first_wrong_answer"]
    assert "max abs diff 0.25" in point["first_wrong_answer"]
    windows = point["windows"]
    assert sum(w["failures"] for w in windows) > 0, windows
    for w in windows:  # each window's failures, by the same reason
        assert sum(r["count"] for r in w["failure_reasons"]) == w["failures"], w
    assert f"): {wrong:,} wrong answers" in done.stdout, done.tail()  # beside the WARNING
    assert f"first wrong answer: {point['first_wrong_answer']}" in done.stdout
    assert "RESULT: FAIL - a point failed requests or answered wrongly" in done.stdout
    assert document["verdict"]["passed"] is False


def test_triton_perf_names_a_server_error_by_its_text(
    wrong_when_batched: Endpoints, tmp_path: Path
) -> None:
    """No target set, no answer checked: a server's error on some inputs still fails the
    sweep, counted under the server's text."""
    done, document = perf(wrong_when_batched, "raises_some", 2, tmp_path)
    assert done.code == 1, done.tail()
    (point,) = document["points"]
    (reason,) = point["failure_reasons"]
    assert reason["kind"] == "server error" and REFUSED_TEXT in reason["text"], reason
    assert reason["count"] == point["total_failures"] > 0
    assert point["answers_checked"] is None  # not asked to check
    assert f"server error: {reason['text']}" in done.stdout, done.tail()


def test_a_point_without_failures_reports_as_before(
    wrong_when_batched: Endpoints, tmp_path: Path
) -> None:
    """One user: nothing is batched, every answer is right: no warning, no verdict (none
    was asked for), exit 0; the answers checked are counted."""
    done, document = perf(
        wrong_when_batched, "wrong_when_batched", 1, tmp_path, "--check-every", "1"
    )
    assert done.code == 0, done.tail()
    (point,) = document["points"]
    assert point["answers_checked"] > 0 and point["wrong_answers"] == 0, point
    assert point["failure_reasons"] == [] and point["total_failures"] == 0
    assert document["verdict"] is None
    assert "failed requests" not in done.stdout and "RESULT" not in done.stdout
