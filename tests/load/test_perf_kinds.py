"""triton-perf on a stateful model and on a decoupled one, against one real server per module
(the zoo's streaming GRU, the same GRU keeping its state in a module buffer, and the streaming
example): sequences driven as perf_analyzer drives them, every answer checked against its own
sequence's reference, a leaking model failing the run naming the sequence; streams measured
token by token, an impossible time-to-first-token target failing the run naming it. The kind
of each model is read from the served config (no flag says it). The units below need no
server."""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_parsers import MAX_SEQUENCE_ID, parse_id_range
from pytest_triton.base.urls import Endpoints
from pytest_triton.load.perf.kinds import (
    KindTally,
    check_kind,
    check_kind_options,
    kind_figures,
    sequence_strategy,
    served_kind,
)
from pytest_triton.load.perf.points import Point
from pytest_triton.load.perf.report import csv_columns, points_markdown, sweep_verdict
from pytest_triton.load.runner.checking import user_answer_check
from pytest_triton.load.runner.embedded import (
    EmbeddedSequenceModel,
    EmbeddedServer,
    EmbeddedStream,
)
from pytest_triton.models import streaming_gru, tiny_generator
from tests.helpers.locust_runs import SHORT_PERF_POINT, Locust, triton_perf_args
from tests.helpers.sequence_models import buffer_gru_spec

GRU = streaming_gru.sequence_spec("small", "direct")
STREAM = tiny_generator.stream_spec(instances=1)  # -m tiny_stream's weights, one stub


# -- units: no server ------------------------------------------------------------------------
def test_the_kind_is_read_from_the_served_config() -> None:
    stateful = {"name": "m", "sequence_batching": {"oldest": {"max_candidate_sequences": 4}}}
    decoupled = {"name": "m", "model_transaction_policy": {"decoupled": True}}
    single = {"name": "m", "dynamic_batching": {}, "model_transaction_policy": {}}
    assert served_kind(stateful) == "sequence" and sequence_strategy(stateful) == "oldest"
    assert served_kind({"sequence_batching": {"direct": {}}}) == "sequence"
    assert sequence_strategy({"sequence_batching": {}}) == "direct"
    assert served_kind(decoupled) == "stream"
    assert served_kind(single) == "single"
    with pytest.raises(ConfigError, match=r"model 'm' on http://h:1 is a stateful model"):
        check_kind("single", "sequence", "m", "dlrm", "http://h:1")
    check_kind("stream", "stream", "m", "tiny_stream", "http://h:1")


def test_what_a_sequence_or_stream_sweep_cannot_do_is_refused_before_load() -> None:
    config = resolve()
    with pytest.raises(ConfigError, match="-b 1,8: a sequence model is measured one request"):
        check_kind_options("sequence", config, [1, 8], [1], False, "none")
    with pytest.raises(ConfigError, match="--shared-memory system: the stream users"):
        check_kind_options("stream", config, [1], [1], False, "system")
    with pytest.raises(ConfigError, match=r"--request-rate-range: .* use --concurrency-range"):
        check_kind_options("sequence", config, [1], [1], True, "none")
    narrow = resolve(sequence_id_range="5:8")
    with pytest.raises(ConfigError, match="--sequence-id-range 5:8 holds 3 ids, fewer than"):
        check_kind_options("sequence", narrow, [1], [1, 4], False, "none")
    check_kind_options("stream", config, [1], [8], True, "none")  # streams: open loop too
    check_kind_options("single", config, [1, 8], [1], True, "system")


def test_sequence_id_ranges_read_as_perf_analyzer_reads_them() -> None:
    assert parse_id_range("1:1000") == (1, 1000)
    assert parse_id_range("7") == (7, MAX_SEQUENCE_ID)  # no end: unbounded
    for bad in ("0:10", "10:10", "a:b", "1:2:3"):
        with pytest.raises(ValueError, match="START"):
            parse_id_range(bad)


def point_figures(**overrides: Any) -> dict[str, Any]:
    """The figures every sweep point has (batch 1, concurrency 2, one second at ~2 ms), for
    Point(**...) beside a kind's own."""
    figures: dict[str, Any] = dict(
        batch_size=1,
        concurrency=2,
        duration_s=1.0,
        requests=100,
        failures=0,
        avg_ms=2.0,
        p50_ms=2.0,
        p90_ms=2.0,
        p95_ms=2.0,
        p99_ms=3.0,
    )
    return {**figures, **overrides}


def test_a_point_of_each_kind_reports_its_own_columns_and_a_wrong_answer_fails() -> None:
    tally = KindTally()
    for i in range(8):  # two sequences of 4 ending at 100.1 and 100.6; all checked
        at = 100.0 + i * 0.08
        end = {"sequence_length": 4} if i % 4 == 3 else {}
        tally.on_request(context={"checked": True, **end}, at=at)
    tally.on_request(
        exception=ValueError("wrong answer: sequence 9: step 2 of 4 differs"),
        context={"checked": True},
        at=101.0,
    )
    figures = kind_figures("sequence", tally, None, first=100.0, duration_s=1.0)
    assert figures["answers_checked"] == 9 and figures["wrong_answers"] == 1
    assert figures["sequences"] == 2 and figures["mean_sequence_length"] == 4
    assert figures["first_wrong_answer"].startswith("wrong answer: sequence 9: step 2")
    base = point_figures(requests=9, failures=1)
    wrong = Point(**base, **figures)
    names = [name for name, _ in csv_columns([wrong])]
    assert names[-6:] == [
        "Sequences",
        "Sequences/Second",
        "Mean Sequence Length",
        "Server Executions",
        "Answers Checked",
        "Wrong Answers",
    ]
    assert "| **Sequences/s** | **Mean Length** | **Checked** |" in points_markdown([wrong])
    verdict = sweep_verdict([wrong, Point(**base)], resolve())  # no target set: still judged
    assert verdict is not None and not verdict["passed"]
    assert "wrong_answers" in verdict["points"][0]["failed_targets"]  # (a failure, too)
    stream = Point(**base, kind="stream", ttft_p99_ms=12.5, itl_p50_ms=1.0, itl_p99_ms=4.0)
    columns = dict(csv_columns([stream]))
    assert columns["TTFT p99"](stream) == 12500 and columns["ITL p99"](stream) == 4000
    assert columns["TTFT p50"](stream) == ""  # not measured: an empty cell
    assert math.isnan(Point(**base).value("perf_ttft_p99"))
    assert stream.value("perf_ttft_p99") == 12.5


def test_a_point_with_failed_requests_fails_the_sweep_unless_the_ratio_allows_it() -> None:
    """--perf-fail-ratio judges every point's whole load: one point over it fails the
    sweep whatever the others do; a wrong answer fails it whatever the ratio allows; a
    sweep without a failed request and without targets has no verdict, as before."""
    base = point_figures()
    reasons = [{"kind": "server error", "text": "boom", "count": 5, "example": "... boom"}]
    ok = Point(**base, total_requests=120, total_failures=0)
    failing = Point(**base, total_requests=120, total_failures=6, failure_reasons=reasons)
    assert sweep_verdict([ok], resolve()) is None
    verdict = sweep_verdict([ok, failing], resolve())
    assert verdict is not None and not verdict["passed"]
    assert verdict["points"][1]["failed_targets"] == ["perf_fail_ratio"]
    assert verdict["points"][1]["failure_reasons"] == reasons
    allowed = sweep_verdict([ok, failing], resolve(perf_fail_ratio=0.05))
    assert allowed is not None and allowed["passed"]
    wrong = Point(
        **{**base, "concurrency": 4}, total_requests=120, total_failures=1, wrong_answers=1
    )
    judged = sweep_verdict([ok, wrong], resolve(perf_fail_ratio=0.5))
    assert judged is not None and not judged["passed"]
    assert judged["points"][1]["failed_targets"] == ["wrong_answers"]


def test_answers_that_cannot_be_checked_are_refused() -> None:
    """--triton-check-every N on a user class with no reference and no served spec."""
    with pytest.raises(ConfigError, match="cannot be checked, it has no `reference`"):
        user_answer_check(
            SimpleNamespace(),
            type("NoReference", (), {}),
            resolve(check_every=5),
            "http://127.0.0.1:8000",
            "m",
            [],
            [],
        )


# -- triton-perf on a real server --------------------------------------------------------------
@pytest.fixture(scope="module")
def kinds_server() -> Iterator[Endpoints]:
    """The GRU, its leaking twin and the token generator, on one server started by pytest."""
    server = EmbeddedServer(
        [
            EmbeddedSequenceModel(GRU),
            EmbeddedSequenceModel(buffer_gru_spec()),
            EmbeddedStream(STREAM),
        ],
        progress=lambda _: None,
    )
    try:
        yield server.start()
    finally:
        server.stop()


def perf(model: str, url: str, tmp_path: Path, *args: str) -> tuple[Any, list[dict[str, str]]]:
    """Run triton-perf; its finished process, and the rows of its CSV."""
    out = tmp_path / f"{model.replace(':', '_')}.csv"
    done = Locust(
        [*triton_perf_args(model), "--url", url, *SHORT_PERF_POINT, "-f", str(out), *args]
    ).finish(120)
    rows = list(csv.DictReader(out.open())) if out.exists() else []
    return done, rows


@pytest.mark.load
@pytest.mark.triton
def test_sequences_of_a_stateful_model_are_measured_and_every_answer_checked(
    kinds_server: Endpoints, tmp_path: Path
) -> None:
    """Four users, each owning one sequence of 6 +- 1 requests at a time under ids from
    100:200; every answer equals its own sequence's reference."""
    report = tmp_path / "gru.json"
    done, rows = perf(
        "streaming_gru",
        f"grpc://{kinds_server.grpc}",
        tmp_path,
        "--model-name",  # the orchestrator then needs no torch: the served config says
        GRU.model_name,
        "--concurrency-range",
        "4",
        "--sequence-length",
        "6",
        "--sequence-id-range",
        "100:200",
        "--check-every",
        "1",
        "--json",
        str(report),
    )
    assert done.code == 0, done.tail()
    assert "streaming_gru_direct is stateful (sequence_batching, strategy direct)" in done.output
    assert [int(r["Concurrency"]) for r in rows] == [4]
    for row in rows:
        assert int(row["Request Count"]) > 0 and int(row["Failure Count"]) == 0, row
        assert int(row["Answers Checked"]) >= int(row["Request Count"]), row
        assert int(row["Wrong Answers"]) == 0
        assert int(row["Sequences"]) > 0 and 5 <= float(row["Mean Sequence Length"]) <= 7, row
        assert float(row["Sequences/Second"]) > 0 and int(row["Server Executions"]) > 0
        assert float(row["Inferences/Second"]) > 0 and int(row["p99 latency"]) > 0
    points = json.loads(report.read_text())["points"]
    assert {p["kind"] for p in points} == {"sequence"}
    (point,) = points
    assert sum(point["server_batches"].values()) == point["server_executions"] > 0
    assert point["server_avg_batch"] >= 1  # (how many ran side by side is the server's)
    assert "sequences ended in the measured windows" in done.stdout


@pytest.mark.load
@pytest.mark.triton
def test_a_model_whose_state_leaks_between_sequences_fails_naming_the_sequence(
    kinds_server: Endpoints, tmp_path: Path
) -> None:
    done, rows = perf(
        "tests.helpers.sequence_models:buffer_gru_spec",
        f"http://{kinds_server.http}",
        tmp_path,
        "--concurrency-range",
        "4",
        "--sequence-length",
        "6",
        "--check-every",
        "1",
    )
    assert done.code == 1, done.tail()
    assert int(rows[0]["Wrong Answers"]) > 0
    assert "RESULT: FAIL - a point failed requests or answered wrongly (failed: " in done.stdout
    assert "wrong_answers)" in done.stdout
    assert "first wrong answer: wrong answer: sequence " in done.stdout
    assert "differs from the module stepped from its initial state" in done.stdout


@pytest.mark.load
@pytest.mark.triton
def test_streams_report_ttft_and_itl_and_an_impossible_ttft_target_fails_naming_it(
    kinds_server: Endpoints, tmp_path: Path
) -> None:
    """One run: the per-token columns are written, one stream in 2 is checked token by token,
    and a TTFT p99 of 1 us fails the run by name while a generous ITL target passes."""
    done, rows = perf(
        "tiny_stream",
        f"grpc://{kinds_server.grpc}",
        tmp_path,
        "--concurrency-range",
        "2",
        "--check-every",
        "2",
        "--perf-ttft-p99",
        "0.001",
        "--perf-itl-p99",
        "100000",
    )
    assert done.code == 1, done.tail()
    assert "tiny_stream is decoupled: measuring streams" in done.output
    (row,) = rows
    for column in ("TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p99"):
        assert int(row[column]) > 0 or column.startswith("ITL"), (column, row)
    assert int(row["TTFT p50"]) <= int(row["TTFT p90"]) <= int(row["TTFT p99"])
    assert int(row["p50 latency"]) > 0  # a stream's end to end
    assert float(row["Output Tokens/Second"]) > float(row["Streams/Second"]) > 0
    assert int(row["Output Tokens"]) == 16 * int(row["Streams"])  # 16 tokens a stream
    assert int(row["Answers Checked"]) > 0 and int(row["Wrong Answers"]) == 0
    # each stream counted once, each count of one span, and they add up
    counts = re.search(
        r"concurrency 2, measured windows: (\d+) streams ended = (\d+) complete \+ (\d+) "
        r"failed \([\d.]+ complete/s\).*\n  whole point \(warm-up included\): (\d+) checked "
        r"token by token = (\d+) agreed \+ (\d+) mismatched against the PyTorch reference",
        done.stdout,
    )
    assert counts is not None, done.tail()
    ended, complete, failed, checked, agreed, mismatched = map(int, counts.groups())
    assert ended == complete + failed and complete == int(row["Streams"]), counts[0]
    assert checked == agreed + mismatched == int(row["Answers Checked"]), counts[0]
    assert mismatched == int(row["Wrong Answers"]) == failed == 0, counts[0]
    assert "perf_ttft_p99 (ms) measured" in done.stdout
    assert "perf_itl_p99" not in done.stdout.split("RESULT:")[1]
    assert "(failed: perf_ttft_p99)" in done.stdout
