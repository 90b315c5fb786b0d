"""The gate report's pieces on documents (no server): headroom, rows per variant x protocol x
transport, load files of both tools, medians over windows, baseline limits, bad baselines, and
what report.md and the plots show."""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_triton.gate import baseline as gb
from pytest_triton.gate import document as gd
from pytest_triton.gate.load_results import figure, load_run, read_load_files
from pytest_triton.gate.markdown import render
from pytest_triton.gate.output import REPORT_JSON, save_baseline, write_report
from pytest_triton.parity.compare import Tolerance, compare_output, compare_outputs
from pytest_triton.parity.results import transport_of
from tests.helpers.gate_documents import document_of

PNG = b"\x89PNG\r\n\x1a\n"


# -- headroom: the share of torch.testing's allowance a comparison used ---------------------------
def test_headroom_is_diff_over_the_allowance() -> None:
    native = np.array([0.0, 100.0], np.float32)
    tol = Tolerance(rtol=1e-2, atol=1e-3)
    # element 0: 5e-4 of an allowance of 1e-3 (50%); element 1: 0.5 of 1.001 (~50%)
    served = np.array([5e-4, 100.25], np.float32)
    diff = compare_output("y", native, served, tol)
    assert diff.ok
    assert diff.headroom_used == pytest.approx(0.5, rel=1e-3)
    beyond = compare_output("y", native, np.array([3e-3, 100.0], np.float32), tol)
    assert not beyond.ok and beyond.headroom_used == pytest.approx(3.0, rel=1e-3)


def test_exact_outputs_and_problems_have_no_finite_headroom() -> None:
    ints = compare_outputs({"label": np.array([1, 2])}, {"label": np.array([1, 3])})
    assert ints.headroom_used == math.inf
    assert (
        compare_outputs({"label": np.array([1, 2])}, {"label": np.array([1, 2])}).headroom_used == 0
    )
    missing = compare_outputs({"y": np.zeros(2, np.float32)}, {})
    assert missing.headroom_used == math.inf
    assert missing.diffs[0].as_dict()["headroom_used"] is None  # strict JSON: no Infinity


def test_transport_is_read_from_the_client_when_it_has_one() -> None:
    class Plain:
        pass

    class SharedMemory:
        shared_memory = "system"

    assert transport_of(Plain()) == "none"
    assert transport_of(SharedMemory()) == "system"


# -- rows -----------------------------------------------------------------------------------------
def output(name: str, used: float | None, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "dtype": "FP32",
        "rtol": 1.3e-6,
        "atol": 1e-5,
        "max_abs": 1e-7,
        "max_rel": 1e-7,
        "headroom_used": used,
        "ok": used is not None and used <= 1,
        **more,
    }


def record(
    variant: str,
    protocol: str,
    outputs: list[dict[str, Any]],
    *,
    transport: str = "none",
    batching: dict[str, Any] | None = None,
    test: str = "t",
) -> dict[str, Any]:
    return {
        "variant": variant,
        "model": variant.split("-")[0],
        "format": "onnx",
        "protocol": protocol,
        "transport": transport,
        "outputs": outputs,
        "ok": all(o["ok"] for o in outputs),
        "batching": batching,
        "test": test,
    }


def test_one_parity_row_per_variant_protocol_and_transport_with_the_worst_figures() -> None:
    records = [
        record("m-onnx-hosted", "http", [output("a", 0.1), output("b", 0.3, max_abs=2e-6)]),
        record("m-onnx-hosted", "http", [output("a", 0.2, rtol=1e-3)], test="t2"),
        record("m-onnx-hosted", "http", [output("a", 0.05)], transport="system"),
        record("m-onnx-hosted", "grpc", [output("a", None)]),
    ]
    rows = {(r["variant"], r["protocol"], r["transport"]): r for r in gd.parity_rows(records)}
    http = rows[("m-onnx-hosted", "http", "none")]
    assert http["checks"] == 2 and http["tests"] == ["t", "t2"]
    assert http["headroom_used"] == 0.3 and http["worst_output"] == "b"
    assert http["max_abs"] == 2e-6 and http["ok"]
    assert rows[("m-onnx-hosted", "http", "system")]["headroom_used"] == 0.05
    assert rows[("m-onnx-hosted", "grpc", "none")]["headroom_used"] is None
    assert not rows[("m-onnx-hosted", "grpc", "none")]["ok"]


def test_batching_rows_sum_requests_and_executions() -> None:
    batching = {
        "requests": 8,
        "executions": 2,
        "inferences": 8,
        "batch_histogram": {"1": 1, "7": 1},
    }
    records = [
        record("m", "grpc", [output("a", 0.0)], batching=batching),
        record("m", "grpc", [output("a", 0.0)], batching=batching),
        record("m", "http", [output("a", 0.0)]),
    ]
    (row,) = gd.batching_rows(records)
    assert (row["requests"], row["executions"], row["inferences"]) == (16, 4, 16)
    assert row["avg_batch_size"] == 4.0 and row["batched"]
    assert row["batch_histogram"] == {"1": 2, "7": 2}


def pipeline_record(
    mode: str, check: str, protocol: str, ok: bool = True, **pipeline: Any
) -> dict[str, Any]:
    return {
        **record(f"p-{mode}", protocol, [output("probs", 0.1 if ok else 3.0)]),
        "check": check,
        "pipeline": {"pipeline": "p", "mode": mode, "front_model": f"p_{mode}", **pipeline},
    }


def proof(step: str, executions: int, batched: bool) -> dict[str, Any]:
    return {
        "step": step,
        "model": f"p_{step}",
        "requests": 8,
        "executions": executions,
        "inferences": 8,
        "batch_histogram": {"1": executions} if not batched else {"4": 2},
        "batched": batched,
    }


def test_pipeline_rows_per_pipeline_and_mode_with_the_first_diverging_step() -> None:
    records = [
        pipeline_record("ensemble", "pipeline_parity", "http"),
        pipeline_record("ensemble", "pipeline_parity", "grpc"),
        pipeline_record("ensemble", "pipeline_batching", "grpc", batching=[proof("pre", 2, True)]),
        pipeline_record("ensemble", "pipeline_batching", "grpc", batching=[proof("pre", 2, True)]),
        pipeline_record(
            "bls",
            "pipeline_parity",
            "http",
            ok=False,
            first_diverging_step="post",
            divergence="first diverging step: 'post'",
        ),
        pipeline_record("bls", "pipeline_batching", "http", batching=[proof("pre", 8, False)]),
        record("m-onnx-hosted", "http", [output("y", 0.1)]),  # not a pipeline's
    ]
    bls, ensemble = gd.pipeline_rows(records)
    assert (ensemble["parity_checks"], ensemble["parity_ok"], ensemble["batched"]) == (
        2,
        True,
        True,
    )
    assert ensemble["paths"] == ["http/none", "grpc/none"] and ensemble["batching_checks"] == 2
    (pre,) = ensemble["steps"]
    assert (pre["requests"], pre["executions"], pre["avg_batch_size"]) == (16, 4, 4.0)
    assert pre["batch_histogram"] == {"4": 4}
    assert (bls["parity_ok"], bls["first_diverging_step"], bls["batched"]) == (False, "post", False)
    markdown = render(document_of(records))
    assert "| p | bls | p_bls | http/none | FAIL | post | NO |" in markdown
    assert "| p | ensemble | pre | p_pre | 16 | 4 | 4.00 | 4 x 4 | yes |" in markdown
    assert "## Pipelines" not in render(gate_document())  # no pipeline, no section


# -- load files -----------------------------------------------------------------------------------
def locust_document(
    throughput: float = 50_000.0,
    p99: float = 80.0,
    *,
    passed: bool = True,
    windows: list[dict[str, float]] | None = None,
) -> dict[str, Any]:
    measured = {
        "requests": 250,
        "failures": 0,
        "samples": 256_000,
        "duration_s": 5.0,
        "avg_ms": 40.0,
        "p50_ms": 32.0,
        "p95_ms": 73.0,
        "p99_ms": p99,
        "throughput": throughput,
        "request_rate": 50.0,
        "fail_ratio": 0.0,
    }
    doc: dict[str, Any] = {
        "host": "http://127.0.0.1:1",
        "passed": passed,
        "exit_code": 0 if passed else 1,
        "checks": [
            {
                "name": "perf_throughput",
                "unit": "samples/s",
                "kind": "min",
                "limit": 10_000,
                "measured": throughput,
                "passed": passed,
                "note": "",
            }
        ],
        "measured": measured,
        "server": [
            {
                "model": "dlrm_onnx",
                "inference_count": 256_000,
                "execution_count": 200,
                "success_count": 250,
                "avg_batch_size": 1280.0,
            }
        ],
        "warnings": [],
    }
    if windows is not None:
        doc["windows"] = windows
    return doc


def perf_document() -> dict[str, Any]:
    def point(concurrency: int, throughput: float, p99: float) -> dict[str, Any]:
        return {
            "batch_size": 64,
            "concurrency": concurrency,
            "duration_s": 5.0,
            "requests": 100,
            "failures": 0,
            "avg_ms": p99 / 2,
            "p50_ms": p99 / 2,
            "p90_ms": p99,
            "p95_ms": p99,
            "p99_ms": p99,
            "throughput": throughput,
            "server_avg_batch": 64.0,
        }

    return {
        "model": "mnist_onnx",
        "unit": "img/s",
        "points": [point(1, 1000.0, 5.0), point(2, 1800.0, 9.0)],
        "verdict": {
            "targets": {"perf_latency_p99": 8.0},
            "passed": True,
            "points": [
                {"batch_size": 64, "concurrency": 1, "passed": True},
                {"batch_size": 64, "concurrency": 2, "passed": False},
            ],
        },
    }


def test_locust_and_triton_perf_files_become_runs(tmp_path: Path) -> None:
    (tmp_path / "load-dlrm.json").write_text(json.dumps(locust_document(passed=False)))
    (tmp_path / "load-mnist.json").write_text(json.dumps(perf_document()))
    (tmp_path / "load-broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text("{}")  # not a load-*.json: ignored
    runs, problems = read_load_files(tmp_path)
    by_name = {r["name"]: r for r in runs}
    assert set(by_name) == {"dlrm", "mnist"}
    dlrm = by_name["dlrm"]
    assert dlrm["kind"] == "locust" and dlrm["passed"] is False and dlrm["model"] == "dlrm_onnx"
    assert dlrm["failed"] == ["perf_throughput (samples/s) measured 50,000, target >= 10,000"]
    assert dlrm["points"][0]["p50_ms"] == 32.0
    mnist = by_name["mnist"]
    assert mnist["kind"] == "triton-perf" and mnist["passed"] is True
    assert [p["key"] for p in mnist["points"]] == [
        "mnist batch 64 concurrency 1",
        "mnist batch 64 concurrency 2",
    ]
    assert [p["passed"] for p in mnist["points"]] == [True, False]
    (problem,) = problems
    assert problem.startswith("load-broken.json: cannot be read as a load result")


def test_a_point_is_the_median_of_its_windows() -> None:
    windows = [
        {"throughput": t, "p99_ms": p} for t, p in ((100.0, 9.0), (10.0, 90.0), (110.0, 11.0))
    ]
    run = load_run("x", "load-x.json", locust_document(throughput=73.0, windows=windows))
    point = run["points"][0]
    assert figure(point, "throughput") == 100.0 and point["throughput"] == 100.0
    assert figure(point, "p99_ms") == 11.0
    assert figure({"throughput": 5.0}, "throughput") == 5.0  # one window: its own figure


# -- baselines ------------------------------------------------------------------------------------
def gate_document(
    throughput: float = 50_000.0,
    p99: float = 80.0,
    headroom: float = 0.05,
    windows: list[dict[str, float]] | None = None,
) -> dict[str, Any]:
    run = load_run("dlrm", "load-dlrm.json", locust_document(throughput, p99, windows=windows))
    return document_of([record("m-onnx-hosted", "http", [output("y", headroom)])], [run])


def test_same_figures_pass_and_a_faster_baseline_names_the_throughput_drop() -> None:
    now = gate_document()
    assert gb.compare_with_baseline(now, now, gb.Limits(), "b.json")["regressions"] == []
    faster = copy.deepcopy(now)
    faster["load"][0]["points"][0]["throughput"] *= 1.5
    result = gb.compare_with_baseline(now, faster, gb.Limits(), "b.json")
    (regression,) = result["regressions"]
    assert regression.startswith("dlrm: throughput down 33.3% (75,000 -> 50,000; limit 10%)")


def test_p99_rise_and_headroom_limits() -> None:
    then = gate_document(p99=80.0)
    now = gate_document(p99=100.0, headroom=0.9)
    regressions = gb.compare_with_baseline(now, then, gb.Limits(), "b.json")["regressions"]
    assert any("p99 latency (ms) up 25.0%" in r for r in regressions), regressions
    assert any(
        "parity used 90.0% of its tolerance allowance (limit 80%, baseline 5.0%)" in r
        for r in regressions
    ), regressions
    relaxed = gb.Limits(p99_rise_pct=30, headroom_pct=95)
    assert gb.compare_with_baseline(now, then, relaxed, "b.json")["regressions"] == []


def test_one_slow_window_cannot_fail_a_run_measured_in_several() -> None:
    steady = [{"throughput": 100.0, "p99_ms": 10.0}] * 3
    one_slow = [
        {"throughput": 100.0, "p99_ms": 10.0},
        {"throughput": 20.0, "p99_ms": 90.0},
        {"throughput": 99.0, "p99_ms": 10.5},
    ]
    result = gb.compare_with_baseline(
        gate_document(windows=one_slow), gate_document(windows=steady), gb.Limits(), "b.json"
    )
    assert result["regressions"] == []
    assert {c["windows"] for c in result["comparisons"] if c["kind"] == "load"} == {3}


def test_what_the_baseline_had_and_this_run_did_not_is_listed() -> None:
    now = gate_document()
    then = copy.deepcopy(now)
    then["load"][0]["points"][0]["key"] = "bert"
    then["parity"][0]["protocol"] = "grpc"
    result = gb.compare_with_baseline(now, then, gb.Limits(), "b.json")
    assert result["not_measured"] == ["load bert", "parity m-onnx-hosted grpc none"]
    assert result["regressions"] == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("{oops", "is not readable JSON"),
        ('{"schema": "something-else"}', "is not a pytest-triton gate report"),
    ],
)
def test_unusable_baselines_say_how_to_make_one(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(gb.BaselineError) as info:
        gb.read_baseline(path)
    assert message in str(info.value) and "--triton-save-baseline FILE" in str(info.value)


def test_a_saved_baseline_reads_back(tmp_path: Path) -> None:
    doc = gate_document()
    save_baseline(doc, tmp_path / "b" / "baseline.json")
    assert gb.read_baseline(tmp_path / "b" / "baseline.json")["load"] == json.loads(
        json.dumps(doc["load"])
    )


# -- verdict, markdown, plots ---------------------------------------------------------------------
def test_verdict_names_every_reason() -> None:
    doc = gate_document()
    doc["failed"] = [{"test": "t::a", "message": "boom"}]
    doc["load"][0]["passed"] = False
    doc["load"][0]["failed"] = ["perf_latency_p99 (ms) measured 90, target <= 50"]
    doc["problems"] = ["load-x.json: cannot be read"]
    doc["session"]["exit_status"] = 5
    reasons = gd.decide(doc)["verdict"]["reasons"]
    assert not doc["verdict"]["passed"]
    assert reasons == [
        "1 test(s) failed: t::a",
        "pytest ended with exit status 5 (no tests ran)",
        "load run dlrm failed its targets: perf_latency_p99 (ms) measured 90, target <= 50",
        "load result unreadable: load-x.json: cannot be read",
    ]


def test_report_files_markdown_and_plots(tmp_path: Path) -> None:
    doc = gate_document()
    doc["load"].append(load_run("mnist", "load-mnist.json", perf_document()))
    doc["baseline"] = gb.compare_with_baseline(doc, doc, gb.Limits(), "main.json")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    written = write_report(doc, tmp_path / "out", headroom_limit_pct=80, step_summary=str(summary))
    assert [p.name for p in written] == [
        "report.json",
        "report.md",
        "parity-headroom.png",
        "load-latency.png",
    ]
    for png in written[2:]:
        assert png.read_bytes().startswith(PNG) and png.stat().st_size > 5000
    stored = json.loads((tmp_path / "out" / REPORT_JSON).read_text())
    assert stored["plots"] == ["parity-headroom.png", "load-latency.png"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    for part in (
        "# Release gate: PASS",
        "## Parity: served vs PyTorch",
        "| m-onnx-hosted | http | none | 1 | y (FP32) |",
        "5.00%",
        "![parity headroom per variant](parity-headroom.png)",
        "## Load",
        "| dlrm | locust | dlrm_onnx | 50,000 | 32 | 73 | 80 | 250 (0) | 1 | PASS |",
        "mnist batch 64 concurrency 2",
        "## Baseline: main.json",
        "![latency vs throughput](load-latency.png)",
    ):
        assert part in markdown, part
    step = summary.read_text()
    assert step.startswith("earlier step\n# Release gate: PASS") and "![" not in step


def test_stages_soak_answers_update_and_plots_reach_the_gate_report() -> None:
    document = locust_document()
    document["stages"] = [
        {
            "index": 1,
            "label": "2 users",
            "throughput": 90.0,
            "p99_ms": 12.0,
            "failures": 0,
            "goodput": 0.995,
            "passed": True,
        },
        {
            "index": 2,
            "label": "8 users",
            "throughput": 120.0,
            "p99_ms": 80.0,
            "failures": 0,
            "goodput": float("nan"),
            "passed": False,
        },
    ]
    document["soak"] = {
        "memory_source": "rss",
        "memory_first_mb": 400.0,
        "memory_last_mb": 700.0,
        "memory_growth_mb_per_min": 300.0,
        "p99_drift_pct": 5.0,
        "samples": [{"at": 1.0}],
    }
    document["figures"] = ["load-dlrm-memory.png", "load-dlrm-latency.png"]
    document["streams"] = {
        "streams": 802,
        "output_tokens_per_s": 675.4,
        "ttft_p50_ms": 24.879,
        "ttft_p99_ms": 91.583,
        "itl_p50_ms": 1.59,
        "itl_p99_ms": 27.967,
        "good_streams": 796,
        "goodput": 0.993,
        "run": {"streams": 900, "checked_streams": 450, "mismatched_streams": 0},
    }
    document["wrong_answers"] = 0
    document["measured"] = {**document["measured"], "goodput": 0.99, "slo_ms": 20.0}
    document["update"] = {
        "model": "dlrm_onnx",
        "old_version": 1,
        "new_version": 2,
        "done": True,
        "p99_during_switch_ms": 38.1,
        "requests_after_switch": 1928,
    }
    run = load_run("dlrm", "load-dlrm.json", document)
    assert run["soak"]["memory_growth_mb_per_min"] == 300.0 and "samples" not in run["soak"]
    doc = gd.build_document(
        gd.Collected(parity=[]),
        environment={"python": "3", "platform": "p", "packages": {}},
        load_runs=[run],
        problems=[],
        exit_status=0,
        duration_s=1.0,
        junit=None,
    )
    text = render(gd.decide(doc), plots=["load-latency.png"])
    for part in (
        "Stage 1 of dlrm (2 users): 90 samples/s, p99 12 ms, 0 failed, goodput 0.995: PASS",
        "Stage 2 of dlrm (8 users): 120 samples/s, p99 80 ms, 0 failed: FAIL",
        "Soak of dlrm: memory (rss) 400 -> 700 MB, 300 MB/min over the steady part",
        "![dlrm: load-dlrm-memory.png](load-dlrm-memory.png)",
        "Answers of dlrm checked: 0 wrong.",
        "Streams of dlrm: 802 streams, 675 output tokens/s; time to first token p50 24.9 / p99 "
        "91.6 ms, inter-token latency p50 1.59 / p99 28 ms, goodput 0.993; whole run 900 "
        "streams ended = 900 complete + 0 failed, 450 checked token by token = 450 agreed + 0 "
        "mismatched.",
        "Goodput of dlrm: 0.99 of the requests succeeded within 20 ms.",
        "Model update in dlrm: dlrm_onnx version 1 -> 2, p99 38.1 ms during the switch, "
        "1928 requests after it.",
    ):
        assert part in text, part
    assert "![" not in render(gd.decide(doc), images=False)


def test_markdown_of_a_failed_gate_lists_failures_and_skips() -> None:
    doc = gate_document()
    doc["failed"] = [{"test": "t::bad", "message": "parity FAILED: model 'm'"}]
    doc["skipped"] = gd.skipped(
        [gd.Outcome(f"t::s{i}", "skipped", "needs a GPU") for i in range(5)]
    )
    text = render(gd.decide(doc))
    assert text.startswith("# Release gate: FAIL\n\n- 1 test(s) failed: t::bad\n")
    assert "| t::bad | parity FAILED: model 'm' |" in text
    assert "| needs a GPU | 5: t::s0, t::s1, t::s2, ... |" in text


def test_the_server_section_says_which_client_carried_checks_and_load() -> None:
    doc = gate_document()
    server = {"launcher": "local", "http": "h:1", "backends": ["python"], "device": "CPU"}
    paths = {
        "http": {"checks": "tritonclient.http", "load": "http1-pool"},
        "grpc": {"checks": "tritonclient.grpc", "load": "grpc-h2"},
    }
    doc["servers"] = [server, {**server, "http": "h:2", "request_paths": paths}]
    text = render(gd.decide(doc))
    assert "| local | h:1 | n/a | python | CPU | - | - |" in text  # an older document
    assert (
        "| local | h:2 | n/a | python | CPU | - | http: checks over tritonclient.http, load over"
        " http1-pool; grpc: checks over tritonclient.grpc, load over grpc-h2 |"
    ) in text


def test_baseline_limits_are_settings_with_checked_values() -> None:
    from pytest_triton.base.config_resolution import resolve
    from pytest_triton.base.errors import ConfigError
    from pytest_triton.base.setting_sources import from_mapping

    config = resolve()
    assert (
        config.gate.baseline_throughput_drop,
        config.gate.baseline_p99_rise,
        config.gate.baseline_headroom,
    ) == (10.0, 20.0, 80.0)
    with pytest.raises(ConfigError, match="expected a number >= 0, got '-5'"):
        resolve(from_mapping({"baseline_throughput_drop": "-5"}, "ini"))


def perf_report_options(json_path: Path, **given: Any) -> argparse.Namespace:
    """triton-perf's report options as its parser leaves them with only --json (and `given`)
    set: what write_reports reads."""
    options = dict(latency_bound=None, percentile=99, csv=None, markdown=None, plot=None)
    return argparse.Namespace(**{**options, "json": json_path, **given})


def test_a_triton_perf_json_with_targets_becomes_a_judged_run(tmp_path: Path) -> None:
    """triton-perf's own --json (write_reports + sweep_verdict) as the report reads it."""
    from pytest_triton.base.config_resolution import resolve
    from pytest_triton.base.setting_sources import from_mapping
    from pytest_triton.load.perf.points import Point
    from pytest_triton.load.perf.report import sweep_verdict, write_reports

    points = [
        Point(
            batch_size=8,
            concurrency=c,
            duration_s=2.0,
            requests=100,
            failures=0,
            avg_ms=5.0 * c,
            p50_ms=5.0 * c,
            p90_ms=9.0 * c,
            p95_ms=9.5 * c,
            p99_ms=10.0 * c,
        )
        for c in (1, 2, 4)
    ]
    config = resolve(from_mapping({"perf_latency_p99": 25.0}, "test"))
    verdict = sweep_verdict(points, config)
    assert verdict is not None and verdict["passed"]
    args = perf_report_options(tmp_path / "load-sweep.json")
    write_reports(points, args, "rec/s", "dlrm_onnx", verdict)
    (run,), problems = read_load_files(tmp_path)
    assert problems == [] and run["kind"] == "triton-perf" and run["passed"] is True
    assert run["targets"] == {"perf_latency_p99": 25.0, "perf_fail_ratio": 0.0}
    assert [(p["concurrency"], p["passed"], p["throughput"]) for p in run["points"]] == [
        (1, True, 400.0),
        (2, True, 400.0),
        (4, False, 400.0),
    ]
    assert sweep_verdict(points, resolve()) is None  # no targets, no verdict


def test_failed_requests_reach_the_gate_report_by_reason(tmp_path: Path) -> None:
    """A triton-perf sweep whose point failed requests: the run fails in the report, which
    names the reasons with their counts, the first example and the answers checked."""
    from pytest_triton.base.config_resolution import resolve
    from pytest_triton.load.perf.points import Point
    from pytest_triton.load.perf.report import sweep_verdict, write_reports

    reasons = [
        {
            "kind": "wrong answer",
            "text": "",
            "reason": "wrong answers",
            "count": 7,
            "example": "wrong answer: model 'm': output 'y' ...",
        },
        {
            "kind": "server error",
            "text": "boom",
            "reason": "server error: boom",
            "count": 2,
            "example": "http request to model 'm' failed: boom",
        },
    ]
    point = Point(
        batch_size=1,
        concurrency=8,
        duration_s=2.0,
        requests=100,
        failures=9,
        avg_ms=5.0,
        p50_ms=5.0,
        p90_ms=9.0,
        p95_ms=9.5,
        p99_ms=10.0,
        answers_checked=120,
        wrong_answers=7,
        total_requests=120,
        total_failures=9,
        failure_reasons=reasons,
    )
    verdict = sweep_verdict([point], resolve())
    assert verdict is not None and not verdict["passed"]
    args = perf_report_options(tmp_path / "load-m.json")
    write_reports([point], args, "infer/s", "m", verdict)
    runs, problems = read_load_files(tmp_path)
    assert problems == [] and runs[0]["passed"] is False
    text = render(document_of([], runs))
    assert "Answers of m batch 1 concurrency 8 checked: 120, 7 wrong." in text
    assert (
        "Failed requests of m batch 1 concurrency 8 by reason: 7 wrong answers; 2 server "
        "error: boom (the first of wrong answers: wrong answer: model 'm': output 'y' ...)."
    ) in text


def test_triton_perf_s_goodput_and_latency_bound_reach_the_report(tmp_path: Path) -> None:
    """triton-perf --goodput 0.9 --latency-bound 60 over two rates: each point's goodput and
    the highest rate at which it held go into report.json and report.md."""
    from pytest_triton.load.perf.points import Point
    from pytest_triton.load.perf.report import write_reports

    points = [
        Point(
            batch_size=1,
            concurrency=1,
            duration_s=2.0,
            requests=100,
            failures=0,
            avg_ms=ms,
            p50_ms=ms,
            p90_ms=ms,
            p95_ms=ms,
            p99_ms=2 * ms,
            request_rate_asked=rate,
            goodput=share,
        )
        for rate, ms, share in ((15.0, 25.0, 1.0), (70.0, 80.0, 0.4))
    ]
    args = perf_report_options(
        tmp_path / "load-rates.json", latency_bound=60.0, goodput=0.9, slo_ms=60.0
    )
    write_reports(points, args, "infer/s", "sleepy", None)
    (run,), problems = read_load_files(tmp_path)
    assert problems == [] and [p["goodput"] for p in run["points"]] == [1.0, 0.4]
    assert (run["goodput_target"], run["slo_ms"]) == (0.9, 60.0)
    (held,) = run["within_bound"]
    assert held["load"] == "rate 15/s" and held["goodput"] == 1.0, held
    doc = gd.build_document(
        gd.Collected(parity=[]),
        environment={"python": "3", "platform": "p", "packages": {}},
        load_runs=[run],
        problems=[],
        exit_status=0,
        duration_s=1.0,
        junit=None,
    )
    write_report(gd.decide(doc), tmp_path / "report")
    saved = json.loads((tmp_path / "report" / REPORT_JSON).read_text())
    assert saved["load"][0]["within_bound"][0]["load"] == "rate 15/s"
    assert saved["load"][0]["points"][1]["goodput"] == 0.4
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert (
        "Goodput of rates (share of requests within 60 ms): rates batch 1 rate 15/s 1, "
        "rates batch 1 rate 70/s 0.4." in markdown
    ), markdown
    assert (
        "Highest load of rates with goodput >= 0.9 within 60 ms: batch 1: rate 15/s "
        "(50 samples/s, p99 50 ms, goodput 1)." in markdown
    ), markdown


def test_a_baseline_edited_by_hand_compares_as_edited() -> None:
    """A point's figures are the medians of its windows; editing them edits the baseline."""
    windows = [{"throughput": 100.0, "p99_ms": 10.0}] * 3
    now = gate_document(windows=windows)
    then = copy.deepcopy(now)
    then["load"][0]["points"][0]["throughput"] = 150.0  # windows left as measured
    (regression,) = gb.compare_with_baseline(now, then, gb.Limits(), "b.json")["regressions"]
    assert regression == "dlrm: throughput down 33.3% (150 -> 100; limit 10%)"


def test_a_triton_tune_json_fails_the_gate_when_the_committed_config_falls_short(
    tmp_path: Path,
) -> None:
    """triton-tune's --json (tables.write_all + gate_check) as the report reads it: the
    committed and the best configuration become points, a failed --gate-within fails the run
    and so the report, with the tool's own message."""
    from pytest_triton.load.tune.space import Candidate
    from pytest_triton.load.tune.strategy import Constraints, Trial
    from pytest_triton.load.tune.tables import Outcome, gate_check, write_all

    def trial(index: int, throughput: float, committed: bool, batching: bool) -> Trial:
        window = {"throughput": throughput, "p50_ms": 2.0, "p95_ms": 3.0, "p99_ms": 4.0}
        point = {"batch_size": 1, "concurrency": 8, "requests": 100, "failures": 0}
        point.update(window, avg_ms=2.0, windows=[window, window, window])
        return Trial(
            index,
            Candidate("onnx", 16, batching, 2000 if batching else 0, concurrency=8),
            "measured",
            throughput=throughput,
            p99_ms=4.0,
            committed=committed,
            point=point,
        )

    outcome = Outcome(
        "m", "infer/s", "throughput", Constraints(), "quick", 1,
        [trial(1, 300.0, True, False), trial(2, 600.0, False, True)], 12.0,
    )  # fmt: skip
    outcome.gate = gate_check(outcome, 10)
    write_all(outcome, tmp_path / "tune", tmp_path / "load-tune-m.json")
    (run,), problems = read_load_files(tmp_path)
    assert problems == [] and run["kind"] == "triton-tune" and run["passed"] is False
    assert [(p["key"], p["throughput"]) for p in run["points"]] == [
        ("tune-m committed", 300.0),
        ("tune-m best", 600.0),
    ]
    assert "falls 50.0% short of the best" in run["failed"][0]
    doc = gd.build_document(
        gd.Collected(parity=[]),
        environment={"python": "3", "platform": "p", "packages": {}},
        load_runs=[run],
        problems=[],
        exit_status=0,
        duration_s=1.0,
        junit=None,
    )
    verdict = gd.decide(doc)["verdict"]
    assert not verdict["passed"] and "load run tune-m failed" in verdict["reasons"][0]
    assert "tune-m best" in render(doc)


def test_accuracy_rows_make_their_section() -> None:
    row = {
        "variant": "mnist-onnx-int8-hosted",
        "precision": "int8",
        "dataset": "digits held-out",
        "model": "mnist_onnx_int8",
        "metric": "top1",
        "against": "labels",
        "served": 0.9639,
        "reference": 0.9694,
        "ratio": 0.9943,
        "samples": 360,
        "interval": [0.94, 0.98],
        "interval_method": "wilson",
        "threshold": 0.9597,
        "rule": ">= 0.99 x reference",
        "ok": True,
        "worst": [],
        "test": "t",
    }
    document = gd.decide(
        gd.build_document(
            gd.Collected(accuracy=[row]),
            environment={"python": "3", "platform": "p", "packages": {}},
            load_runs=[],
            problems=[],
            exit_status=0,
            duration_s=1.0,
            junit=None,
        )
    )
    markdown = render(document)
    assert "## Accuracy: served vs fp32 PyTorch on a dataset" in markdown
    assert (
        "| mnist-onnx-int8-hosted | digits held-out | 360 | top1 (vs labels) | 0.9639 | 0.9694 "
        "| 0.9943 | [0.9400, 0.9800] | 0.9597 (>= 0.99 x reference) | PASS |"
    ) in markdown
    assert "## Accuracy" not in render(gate_document())  # no accuracy check, no section
