"""The gate report from a real pytest session on real servers (pytester, two xdist workers):
what the served tests recorded, JUnit XML, the job summary, a baseline refused. The examples'
gate with its load run and a baseline comparison is in test_gate_end_to_end."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.helpers.plugin_runs import CONFTEST, run

pytestmark = pytest.mark.triton

TESTS = """
import pytest
from pytest_triton import assert_dynamic_batching

def test_parity(triton_model, triton_client):
    triton_model.assert_parity(triton_client, batch_size=3)

def test_batching(triton_model, triton_client):
    assert_dynamic_batching(triton_model.assert_batched_parity(triton_client, requests=8))

def test_reference_drifts(triton_server, triton_client):
    model = triton_server.model("affine_torchscript_trace")  # a Triton model name works too
    native = model.native
    model.native = lambda inputs: {k: v + 1e-3 for k, v in native(inputs).items()}
    model.assert_parity(triton_client)

@pytest.mark.skip(reason="needs a GPU runner")
def test_gpu_only():
    pass
"""


def test_report_of_a_failing_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_affine=TESTS)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    # Workers record on their test reports; the controller writes the report.
    result = run(pytester, "-n", "2", "--triton-report", "out", "--triton-save-baseline", "b.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*= pytest-triton gate =*",
            "gate: FAIL",
            "  - 2 test(s) failed: *",
            "report: out*report.json",
            "report: out*parity-headroom.png",
            "baseline NOT saved to b.json: the gate failed*",
        ]
    )
    assert not (pytester.path / "b.json").exists()
    out = pytester.path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "junit.xml",
        "parity-headroom.png",
        "report.json",
        "report.md",
    ]
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"]["passed"] is False
    assert report["session"]["tests"] == {"passed": 4, "failed": 2, "skipped": 1}
    servers = report["servers"]  # one per worker that ran a served test
    assert 1 <= len(servers) <= 2 and len({s["http"] for s in servers}) == len(servers)
    for server in servers:
        assert server["launcher"] == "local" and server["tritonserver_version"] == "2.51.0"
        assert server["backends"] == ["python"] and server["device"] == "CPU"
    assert report["environment"]["packages"]["torch"].startswith("2.")
    rows = {(r["variant"], r["protocol"], r["transport"]): r for r in report["parity"]}
    assert set(rows) == {("affine-torchscript-trace-hosted", p, "none") for p in ("http", "grpc")}
    for row in rows.values():
        # parity + batched + the drifting reference: 1e-3 off in an allowance of about 1e-5
        assert row["checks"] == 3 and row["ok"] is False
        assert 50 < row["headroom_used"] < 100, row
        assert (row["worst_output"], row["rtol"], row["atol"]) == ("y", 1.3e-6, 1e-5)
    checks = [c for c in report["parity_checks"] if c["check"] == "parity" and c["ok"]]
    assert checks and all(c["headroom_used"] < 1 for c in checks)
    assert {(b["protocol"], b["requests"]) for b in report["batching"]} == {
        ("http", 8),
        ("grpc", 8),
    }
    assert all(b["executions"] < 8 for b in report["batching"])
    assert report["skipped"] == [
        {"reason": "needs a GPU runner", "count": 1, "tests": ["test_affine.py::test_gpu_only"]}
    ]
    assert {f["test"] for f in report["failed"]} == {
        f"test_affine.py::test_reference_drifts[{p}]" for p in ("http", "grpc")
    }
    assert report["failed"][0]["message"].startswith(
        "AssertionError: parity FAILED: model 'affine'"
    )
    markdown = (out / "report.md").read_text()
    assert markdown.startswith("# Release gate: FAIL")
    assert "| affine-torchscript-trace-hosted | grpc | none | 3 | y (FP32) |" in markdown
    assert "| needs a GPU runner | 1: test_affine.py::test_gpu_only |" in markdown
    junit = ET.parse(out / "junit.xml").getroot()
    properties = [p.get("name") for p in junit.iter("property")]
    assert properties.count("triton_parity") == 6
    assert properties.count("triton_server") == len(servers)
    assert summary.read_text().startswith("# Release gate: FAIL")


def test_missing_baseline_stops_the_session_before_any_server(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = run(pytester, "--triton-baseline", "nowhere.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "pytest-triton --triton-baseline: baseline nowhere.json does not exist; write one "
        "with --triton-save-baseline FILE"
    ) in result.stderr.str()
