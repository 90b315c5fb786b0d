"""benchmarks/vs_model_analyzer.py: the parts that run without model_analyzer (its server
wrapper, its configuration, its results read from a recorded CSV, the table, the refusals),
and, where model_analyzer is installed, one real run of the whole benchmark on a tiny space."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks import vs_model_analyzer as vs
from benchmarks.perf_analyzer_tool import MISSING, find_perf_analyzer
from pytest_triton.server.local import find_installation, server_environment

# Recorded: model_analyzer 1.58's brute search of tests/helpers/tune_models.py's centered model
# (mbs 1-4, one instance, concurrency 1-2) on this project's 2-core machine, its
# results/metrics-model-inference.csv (header split here only for the line length).
RECORDED_CSV = (
    "Model,Batch,Concurrency,Model Config Path,Instance Group,Max Batch Size,"
    "Satisfies Constraints,Throughput (infer/sec),p99 Latency (ms)\n"
    """centered_onnx,1,2,centered_onnx_config_default,1:CPU,16,Yes,2652.8,4.0
centered_onnx,1,1,centered_onnx_config_default,1:CPU,16,Yes,848.3,8.5
centered_onnx,1,1,centered_onnx_config_0,1:CPU,1,Yes,2501.5,0.6
centered_onnx,1,2,centered_onnx_config_0,1:CPU,1,Yes,1848.3,7.8
centered_onnx,1,2,centered_onnx_config_1,1:CPU,2,Yes,2500.7,2.7
centered_onnx,1,1,centered_onnx_config_1,1:CPU,2,Yes,1772.5,3.5

"""
)
GROUP = "instance_group { count: 1 kind: KIND_CPU }"
CONFIGS = {  # its output repository's configs (name, batching and instances as it wrote them)
    "centered_onnx_config_default": f"max_batch_size: 16\n{GROUP}",
    "centered_onnx_config_0": f"max_batch_size: 1\n{GROUP}\ndynamic_batching {{\n}}",
    "centered_onnx_config_1": f"max_batch_size: 2\n{GROUP}\ndynamic_batching {{\n}}",
}


def recorded_search(tmp_path: Path) -> vs.Search:
    export = tmp_path / "export" / "results"
    export.mkdir(parents=True)
    (export / "metrics-model-inference.csv").write_text(RECORDED_CSV)
    for name, text in CONFIGS.items():
        (tmp_path / "out" / name).mkdir(parents=True)
        (tmp_path / "out" / name / "config.pbtxt").write_text(f'name: "centered_onnx"\n{text}\n')
    log = "[Model Analyzer] No longer increasing max_batch_size because throughput has plateaued"
    return vs.read_ma_results(tmp_path / "export", tmp_path / "out", 200.0, log)


def test_model_analyzers_search_is_read_from_its_csv_and_configs(tmp_path: Path) -> None:
    """Every configuration and concurrency it measured; its best: the highest throughput
    (here its default, the unbatched committed configuration, at concurrency 2)."""
    ma = recorded_search(tmp_path)
    assert ma.measurements == 6 and ma.seconds == 200.0
    assert ma.configs == [
        vs.Config(1, False, 0, 1),  # dynamic batching at max_batch_size 1 batches nothing
        vs.Config(2, True, 0, 1),
        vs.Config(16, False, 0, 1),
    ]
    assert ma.best == vs.Config(16, False, 0, 1) and ma.best_concurrency == 2
    assert ma.best_throughput == 2652.8
    assert ma.best_dir == tmp_path / "out" / "centered_onnx_config_default"
    assert "plateaued" in ma.note and "centered_onnx_config_default" in ma.note


def test_the_search_table_says_whether_each_tool_measured_the_others_best(
    tmp_path: Path,
) -> None:
    """Each tool's best and whether the other tool measured that configuration (at any
    concurrency): triton-tune measured model_analyzer's (the committed one), not the reverse."""
    ma = recorded_search(tmp_path)
    committed = {
        "max_batch_size": 16,
        "dynamic_batching": False,
        "max_queue_delay_us": 0,
        "instance_count": 1,
        "concurrency": 1,
    }
    best = {**committed, "max_batch_size": 2, "concurrency": 4}
    batched = {**best, "dynamic_batching": True, "max_queue_delay_us": 500}
    result = {
        "candidates": [
            {"status": "measured", "candidate": committed, "measurements": []},
            {"status": "measured", "candidate": best, "measurements": [1, 2]},
            {"status": "disqualified", "candidate": batched},
        ],
        "best": {"candidate": best, "throughput": 900.0},
    }
    tt = vs.read_tune_results(result, tmp_path / "tune", 120.0)
    assert tt.configs == [vs.Config(2, False, 0, 1), vs.Config(16, False, 0, 1)]
    assert tt.measurements == 3  # two candidates, one measured again
    assert tt.best == vs.Config(2, False, 0, 1) and tt.best_concurrency == 4
    assert tt.note == "1 disqualified by parity" and tt.best_dir is None
    table = vs.search_table([ma, tt]).splitlines()
    assert table[2] == (
        "| model_analyzer | 200 s | 3 | 6 | mbs 16, dyn off, 1 inst, c2 | 2,652.8 infer/s | yes |"
    )
    assert table[3] == (
        "| triton-tune | 120 s | 2 | 3 | mbs 2, dyn off, 1 inst, c4 | 900.0 infer/s | no |"
    )


def test_the_server_wrapper_runs_the_bundled_server_as_the_launcher_does(
    tmp_path: Path,
) -> None:
    """model_analyzer starts tritonserver with its own arguments: the wrapper adds the
    launcher's environment, the staged backends and our shared-memory prefix, then execs the
    bundled server (here with --help: it answers with its usage, so it ran)."""
    install = find_installation()
    env = {**server_environment(install), "TMPDIR": str(tmp_path)}
    backends = vs.staged_backends(install, tmp_path / "backends")
    assert (backends / "python" / "triton_python_backend_stub").is_file()
    script = vs.wrapper_script(install.executable, env, backends, "vs_ma_test_")
    assert script.startswith("#!/bin/sh\n")
    assert f"export LD_LIBRARY_PATH='{env['LD_LIBRARY_PATH']}'\n" in script
    assert f"--backend-directory='{backends}'" in script
    assert "--backend-config=python,shm-region-prefix-name=vs_ma_test_" in script
    wrapper = tmp_path / "tritonserver"
    wrapper.write_text(script)
    wrapper.chmod(0o755)
    done = subprocess.run([str(wrapper), "--help"], capture_output=True, text=True, timeout=60)
    assert "--model-repository" in done.stdout + done.stderr


def test_model_analyzers_configuration_asks_for_the_same_space(tmp_path: Path) -> None:
    config = vs.ma_config(
        repository=tmp_path / "models",
        model="centered_onnx",
        workdir=tmp_path,
        server=tmp_path / "tritonserver",
        perf_analyzer=tmp_path / "perf_analyzer",
        ports=[8100, 8101, 8102],
        input_data=tmp_path / "input.json",
        max_batch_size=128,
        max_instances=3,
        max_concurrency=16,
    )
    json.loads(json.dumps(config))  # written as JSON, which YAML reads
    assert config["run_config_search_mode"] == "brute"
    assert config["triton_launch_mode"] == "local"
    assert config["run_config_search_max_model_batch_size"] == 128
    assert config["run_config_search_max_instance_count"] == 3
    assert config["run_config_search_max_concurrency"] == 16
    assert config["triton_grpc_endpoint"] == "localhost:8101"
    model = config["profile_models"]["centered_onnx"]
    assert model["cpu_only"] is True
    assert model["perf_analyzer_flags"] == {"input-data": str(tmp_path / "input.json")}
    command = vs.tune_command("dlrm", parse(), tmp_path, 99.6)
    assert command[command.index("--max-batch-sizes") + 1] == "1,2,4,8,16,32,64,128"
    assert command[command.index("--instance-counts") + 1] == "1,2,3"
    assert command[command.index("--concurrency-range") + 1] == "1,2,4,8,16"
    assert command[command.index("--time-budget") + 1] == "99s"


def parse(*argv: str) -> object:
    import argparse

    return argparse.Namespace(max_batch_size=128, max_instances=3, max_concurrency=16)


def test_a_missing_model_analyzer_is_named_with_its_install_command(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as refused:
        vs.main(["--model-analyzer", str(tmp_path / "nowhere" / "model-analyzer")])
    message = str(refused.value)
    assert "no model-analyzer executable there" in message
    assert "pip install 'triton-model-analyzer==1.58.*'" in message


@pytest.mark.skipif(find_perf_analyzer() is None, reason=MISSING)
def test_a_failing_model_analyzer_names_the_step_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model_analyzer that fails: the step and its own last lines are said; the work
    directory (models, output repository, wrapper) is gone."""
    broken = tmp_path / "model-analyzer"
    broken.write_text("#!/bin/sh\necho 'first line'\necho 'ERROR: no GPU metrics here'\nexit 3\n")
    broken.chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(SystemExit) as failed:
        vs.main(["--model-analyzer", str(broken), "--model", "centered"])
    message = str(failed.value)
    assert message.startswith("model_analyzer profile (exit 3) failed; its last lines:")
    assert message.endswith("first line\nERROR: no GPU metrics here")
    assert list(scratch.glob("pytest-triton-vs-ma-*")) == []


MODEL_ANALYZER = vs.find_model_analyzer()


@pytest.mark.skipif(
    MODEL_ANALYZER is None or find_perf_analyzer() is None,
    reason="model_analyzer is not installed: "
    + vs.INSTALL
    + ", then set MODEL_ANALYZER=/tmp/ma-venv/bin/model-analyzer (and `make perf-analyzer`)",
)
def test_the_benchmark_runs_model_analyzer_and_triton_tune_on_a_batch_mixing_model(
    tmp_path: Path,
) -> None:
    """The whole benchmark on a tiny space (mbs 1-2, one instance, concurrency 1): both
    searches, the referee and the answer check. model_analyzer's pick batches requests and
    changes the centered model's answers; triton-tune's does not."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            str(vs.HERE / "vs_model_analyzer.py"),
            "--model-analyzer",
            str(MODEL_ANALYZER),
            "--model",
            "centered",
            "--max-batch-size",
            "2",
            "--max-instances",
            "1",
            "--max-concurrency",
            "1",
            "--rounds",
            "1",
            "--concurrency",
            "4",
            "--check-answers",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["answers"]["triton-tune"] == ""
    assert data["answers"]["committed"] == ""
    ma_pick = data["served"]["model_analyzer"][1]
    if ma_pick["dynamic_batching"]:  # its pick batches: rows come back centred on others
        assert "differ; first: parity FAILED: request" in data["answers"]["model_analyzer"]
    assert "| model_analyzer |" in done.stdout and "| triton-tune |" in done.stdout
