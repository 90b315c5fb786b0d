"""triton-tune: the search strategies on a synthetic model of the server (no server), then
two short real runs (a real tritonserver, real exports, the real load generator): a quick
search that writes its table, plot and best config and disqualifies a configuration that
changes answers, and the gate check failing a committed configuration that falls short."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.cli.triton_tune import _parser, options_from
from pytest_triton.load.tune import space as sp
from pytest_triton.load.tune.accuracy_rule import AccuracyRule
from pytest_triton.load.tune.progress import Progress
from pytest_triton.load.tune.space import Candidate, SearchSpace
from pytest_triton.load.tune.strategy import (
    Budget,
    Constraints,
    Search,
    Trial,
    best_trial,
    check_constraints,
    pareto_front,
    rank_key,
    remeasured,
)
from pytest_triton.load.tune.tables import Outcome, gate_check, markdown
from pytest_triton.load.tune.trials import check_launcher
from pytest_triton.load.tune.tuner import SpaceChoice, TuneOptions
from pytest_triton.load.tune.tuner import tune as run_tune
from pytest_triton.server.gpu import visible_gpus
from tests.helpers import warm_start
from tests.helpers.locust_runs import Locust, subprocess_env
from tests.helpers.tune_models import batch_centered_spec

PNG = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parents[2]


# -- the strategies, on a model of a server -------------------------------------------------------
def synthetic(candidate: Candidate) -> tuple[float, float]:
    """Throughput and p99 of a made-up server: batching helps, and more with a longer queue
    delay up to 1 ms; two instances help; concurrency raises both throughput and p99."""
    rate = 100.0 * min(candidate.concurrency, 4)
    if candidate.dynamic_batching:
        rate *= 2 + min(candidate.max_queue_delay_us, 1000) / 1000
    rate *= 1.3 if candidate.instance_count == 2 else 1.0
    p99 = 2.0 * candidate.concurrency + candidate.max_queue_delay_us / 1000
    return rate, p99


def space(**changes: object) -> SearchSpace:
    values: dict[str, object] = dict(
        format=("onnx",),
        max_batch_size=(8,),
        dynamic_batching=(False, True),
        max_queue_delay_us=(0, 500, 1000, 4000),
        preferred_batch_sizes=((),),
        instance_count=(1, 2),
        instance_kind=(None,),
        threads=(0,),
        concurrency=(1, 2, 4, 8),
    )
    values.update(changes)
    return SearchSpace(**values)  # type: ignore[arg-type]


def measurer(  # type: ignore[no-untyped-def]
    constraints: Constraints, calls: list[Candidate], slo_ms: float | None = None
):
    """Measures the synthetic server; each instance holds 300 MB; with an SLO, every request
    of a candidate whose p99 is within it counts, else a fifth of them."""

    def measure(candidate: Candidate) -> Trial:
        calls.append(candidate)
        throughput, p99 = synthetic(candidate)
        trial = Trial(len(calls), candidate, "measured", throughput=throughput, p99_ms=p99)
        trial.memory_mb = 300.0 * candidate.instance_count
        if slo_ms is not None:
            trial.within_slo = 1.0 if p99 <= slo_ms else 0.2
        trial.violations = check_constraints(trial, constraints)
        return trial

    return measure


COMMITTED = Candidate("onnx", 8, False, concurrency=1)


def test_quick_search_climbs_to_the_best_within_the_constraint() -> None:
    constraints = Constraints(max_p99_ms=10)
    calls: list[Candidate] = []
    search = Search(space(), COMMITTED, 1, "throughput", constraints, Budget(None))
    trials = list(search.run(measurer(constraints, calls)))
    best = max((t for t in trials if t.feasible), key=lambda t: t.throughput)
    # concurrency 4 (8 breaks p99 10 ms), batching with a 1 ms delay, two instances
    assert (best.candidate.concurrency, best.candidate.dynamic_batching) == (4, True)
    assert (best.candidate.max_queue_delay_us, best.candidate.instance_count) == (1000, 2)
    assert len(calls) == len(set(calls)) == len(trials)  # each candidate measured once
    every = list(space().every(1))
    assert len(every) == 2 * 4 * 4 + 2 * 4  # batching: delays x counts x concurrencies
    assert len(calls) < len(every) / 2  # quick: far fewer than every combination


@pytest.mark.parametrize("export_speed", [1.4, 0.5])
def test_the_quick_search_tries_each_format_and_keeps_the_faster(export_speed: float) -> None:
    """Format is a dimension like the others: from a committed TorchScript configuration the
    quick search climbs batching and instances, then tries that configuration as a
    torch.export program too, and keeps whichever format serves faster."""
    constraints = Constraints(max_p99_ms=10)
    calls: list[Candidate] = []
    inner = measurer(constraints, calls)

    def measure(candidate: Candidate) -> Trial:
        trial = inner(candidate)
        trial.throughput *= export_speed if candidate.format == "torch-export" else 1.0
        return trial

    formats = ("torchscript-trace", "torch-export")
    start = dataclasses.replace(COMMITTED, format="torchscript-trace")
    search = Search(space(format=formats), start, 1, "throughput", constraints, Budget(None))
    best = best_trial(list(search.run(measure)), "throughput", constraints)
    assert best is not None
    assert best.candidate.format == ("torch-export" if export_speed > 1 else "torchscript-trace")
    # torch-export was first tried at the configuration the climb had found, not from scratch
    first = next(c for c in calls if c.format == "torch-export")
    assert first.dynamic_batching and first.instance_count == 2, first


def test_exhaustive_search_tries_everything_and_the_budget_stops_it() -> None:
    calls: list[Candidate] = []
    none = Constraints()
    search = Search(space(), COMMITTED, 1, "p99", none, Budget(None), "exhaustive")
    trials = list(search.run(measurer(none, calls)))
    assert len(trials) == len(list(space().every(1)))
    assert min(trials, key=lambda t: t.p99_ms).candidate.concurrency == 1
    # a budget already spent after the first candidate: it alone is measured
    budget = Budget(1e-9)
    short = Search(space(), COMMITTED, 1, "p99", none, budget, "exhaustive")
    assert len(list(short.run(measurer(none, [])))) == 1
    assert "time budget" in short.stopped


def test_pareto_front_and_gate_check() -> None:
    def trial(index: int, throughput: float, p99: float, committed: bool = False) -> Trial:
        c = Candidate("onnx", 8, True, concurrency=index)
        return Trial(index, c, "measured", throughput=throughput, p99_ms=p99, committed=committed)

    trials = [trial(1, 100, 5, True), trial(2, 200, 4), trial(3, 300, 9), trial(4, 150, 9)]
    assert [t.index for t in pareto_front(trials)] == [2, 3]
    outcome = Outcome("m", "rec/s", "throughput", Constraints(), "quick", 1, trials, 1.0)
    fail = gate_check(outcome, 10)
    assert not fail.passed and fail.shortfall_percent == pytest.approx(100 * 200 / 300)
    assert "falls 66.7% short of the best" in fail.message
    assert gate_check(outcome, 70).passed
    broken = dataclass_copy(trials[0], violations=["p99 5.00 ms > 4 ms"])
    alone = Outcome("m", "rec/s", "throughput", Constraints(), "quick", 1, [broken], 1.0)
    verdict = gate_check(alone, 50)
    assert not verdict.passed and "breaks its constraints" in verdict.message
    dq = Trial(5, Candidate("onnx", 8, True), "disqualified", message="parity FAILED: y")
    table = markdown(
        Outcome("m", "rec/s", "throughput", Constraints(), "quick", 1, [*trials, dq], 1.0)
    )
    assert "DISQUALIFIED: parity FAILED: y" in table and "**best**" in table


def test_every_batching_candidate_changing_answers_is_said_in_one_line() -> None:
    """A model whose every dynamic-batching candidate changed answers: the summary says so
    in one line, with the first mismatch, and recommends the best unbatched configuration;
    one batching candidate that kept its answers and the usual per-candidate lines return."""
    off = Trial(1, Candidate("onnx", 8, False), "measured", throughput=50.0, p99_ms=2.0)
    off.committed = True
    dq = [
        Trial(i, Candidate("onnx", 8, True, max_queue_delay_us=d), "disqualified", message=m)
        for i, d, m in ((2, 0, "request 3 of 8 sent together: parity FAILED\n y"), (3, 500, "x"))
    ]
    outcome = Outcome("m", "rec/s", "throughput", Constraints(), "quick", 1, [off, *dq], 1.0)
    lines = [line for line in outcome.summary() if "DISQUALIFIED" in line]
    assert lines == [
        "DISQUALIFIED #2, #3: every dynamic-batching candidate changes answers (#2 onnx mbs 8 "
        "dyn 0us x1 c1: request 3 of 8 sent together: parity FAILED y); recommended: the best "
        "unbatched configuration, #1 onnx mbs 8 dyn off x1 c1: 50.0 rec/s, p99 2.00 ms"
    ]
    kept = Trial(4, Candidate("onnx", 8, True, concurrency=2), "measured", throughput=90.0)
    mixed = Outcome("m", "rec/s", "throughput", Constraints(), "quick", 1, [*dq, kept], 1.0)
    assert [line[:15] for line in mixed.summary() if "DISQUALIFIED" in line] == [
        "DISQUALIFIED #2",
        "DISQUALIFIED #3",
    ]


def test_a_remeasured_trial_takes_the_medians() -> None:
    """--confirm: the committed and the best configuration are measured again; their
    figures become medians, and the constraints are judged on those."""
    c = Candidate("onnx", 8, True, concurrency=4)
    limits = Constraints(max_p99_ms=10)
    trial = Trial(1, c, "measured", throughput=1000.0, p99_ms=30.0, avg_ms=3.0)
    trial.violations = check_constraints(trial, limits)
    assert trial.violations == ["p99 30.00 ms > 10 ms"]
    for throughput, p99 in ((500.0, 6.0), (600.0, 7.0)):
        again = Trial(1, c, "measured", throughput=throughput, p99_ms=p99, avg_ms=2.0)
        remeasured(trial, again, limits)
    assert (trial.throughput, trial.p99_ms, len(trial.measurements)) == (600.0, 7.0, 3)
    assert trial.feasible
    remeasured(trial, Trial(1, c, "failed"), limits)  # a failed re-measurement changes nothing
    assert len(trial.measurements) == 3


def test_memory_constraint_keeps_the_search_within_it() -> None:
    """Two instances need 600 MB: under a 400 MB limit they break the constraint, rank below
    every feasible candidate, and the best keeps one instance."""
    limits = Constraints(max_memory_mb=400)
    search = Search(space(), COMMITTED, 1, "throughput", limits, Budget(None), "exhaustive")
    trials = list(search.run(measurer(limits, [])))
    best = best_trial(trials, "throughput", limits)
    assert best is not None and best.candidate.instance_count == 1
    doubled = [t for t in trials if t.candidate.instance_count == 2]
    assert doubled and all(t.violations == ["memory 600 MB > 400 MB"] for t in doubled)
    assert max(rank_key(t, "throughput", limits) for t in doubled) < rank_key(
        best, "throughput", limits
    )
    # nearer the limit ranks higher among the infeasible
    near, far = (dataclass_copy(doubled[0], memory_mb=m) for m in (450.0, 900.0))
    for t in (near, far):
        t.violations = check_constraints(t, limits)
    assert rank_key(near, "throughput", limits) > rank_key(far, "throughput", limits)
    unknown = dataclass_copy(doubled[0], memory_mb=None)
    assert check_constraints(unknown, limits) == []  # judged only where it can be read


def test_max_memory_is_refused_where_the_server_memory_is_unknown() -> None:
    """With --triton-url the server's processes are not ours to read: the constraint would
    never apply, so the search refuses it before exporting anything."""
    options = TuneOptions(
        model="dlrm",
        constraints=Constraints(max_memory_mb=400),
        config=resolve(url="http://127.0.0.1:9"),
    )
    with pytest.raises(ConfigError, match=r"--max-memory .* external launcher's server"):
        run_tune(options)


def test_goodput_objective_prefers_answers_within_the_slo() -> None:
    """Throughput alone climbs to concurrency 4 and a 1 ms queue delay, whose p99 leaves the
    5 ms SLO; goodput counts only what is answered within it and picks concurrency 2."""
    none = Constraints()
    trials = list(
        Search(space(), COMMITTED, 1, "goodput", none, Budget(None), "exhaustive").run(
            measurer(none, [], slo_ms=5)
        )
    )
    fastest = best_trial(trials, "throughput", none)
    best = best_trial(trials, "goodput", none)
    assert fastest is not None and fastest.candidate.concurrency >= 4
    assert fastest.within_slo == 0.2
    assert best is not None and best.within_slo == 1.0 and best.p99_ms <= 5
    c = best.candidate
    assert (c.concurrency, c.dynamic_batching, c.max_queue_delay_us, c.instance_count) == (
        2,
        True,
        1000,
        2,
    )
    assert best.goodput == pytest.approx(780) and best.goodput > fastest.goodput
    quick = Search(space(), COMMITTED, 1, "goodput", none, Budget(None))
    found = best_trial(list(quick.run(measurer(none, [], slo_ms=5))), "goodput", none)
    assert found is not None and found.goodput == pytest.approx(best.goodput)
    with pytest.raises(ConfigError, match="--slo"):
        run_tune(TuneOptions(model="dlrm", objective="goodput"))


def test_progress_bar_on_a_terminal_and_lines_in_a_log() -> None:
    """A terminal gets a tqdm bar over the candidates with the ETA, the results printed above
    it; a log (not a terminal) gets one line per candidate with its ETA."""
    none = Constraints()
    terminal, printed = io.StringIO(), []
    bar = Progress(printed.append, bar=True, file=terminal, total=3)
    search = Search(space(), COMMITTED, 1, "throughput", none, Budget(60), "exhaustive")
    for trial in search.run(measurer(none, [])):
        bar.candidate(trial, search, "infer/s")
    bar.close()
    done = len(search.trials)
    drawn = terminal.getvalue()
    assert f"{done}/{done} candidates" in drawn and "ETA 0:00" in drawn and "\r" in drawn
    assert drawn.rstrip().endswith("done]")
    assert len(printed) == done and "infer/s" in printed[0] and "ETA" not in printed[0]
    lines: list[str] = []
    log = Progress(lines.append, file=io.StringIO())  # not a terminal: no bar
    assert not log.drawing
    quick = Search(space(), COMMITTED, 1, "throughput", none, Budget(None))
    for trial in quick.run(measurer(none, [])):
        log.candidate(trial, quick, "infer/s")
    assert lines[0].startswith("candidate 1 (pass: <= ") and "ETA <= " in lines[0]
    assert len(lines) == len(quick.trials)


def test_tune_takes_the_launcher_choice_and_names_what_it_lacks() -> None:
    """triton-tune takes --triton-launcher, --triton-image and --triton-gpu from the settings
    table; a launcher that cannot start here stops the search before any export, saying
    what it lacks (here: an image that does not exist, or no GPU)."""
    args = _parser().parse_args(
        ["-m", "dlrm", "--triton-launcher", "container", "--triton-image", "pytest-triton-cpu:none"]
    )
    config = options_from(args).config
    assert config is not None and config.server.launcher == "container"
    lacks = r"cannot use the container launcher here: .*(Docker|image)"
    with pytest.raises(ConfigError, match=lacks):
        check_launcher(config)
    gpu = options_from(_parser().parse_args(["-m", "dlrm", "--triton-gpu"])).config
    assert gpu is not None and gpu.server.gpu
    if visible_gpus().count == 0:
        with pytest.raises(ConfigError, match=r"cannot use the GPU launcher here: .*NVIDIA GPU"):
            check_launcher(gpu)


def test_precision_is_a_dimension_judged_by_accuracy() -> None:
    """On a made-up server where INT8 serves 1.6x fp32: the quick search steps to int8 when
    its accuracy keeps the ratio, and stays at fp32 when the runner disqualified int8 for
    falling under it. A reduced precision without an accuracy rule is refused before any
    export; the flags come from the settings table."""
    none = Constraints()
    both = space(precision=("fp32", "int8"), dynamic_batching=(False,), instance_count=(1,))

    def measured(ratio: float):  # type: ignore[no-untyped-def]
        def measure(candidate: Candidate) -> Trial:
            rate, p99 = synthetic(candidate)
            trial = Trial(0, candidate, "measured", throughput=rate, p99_ms=p99)
            trial.accuracy_ratio = 1.0 if candidate.precision == "fp32" else ratio
            if trial.accuracy_ratio < 0.99:
                trial.status, trial.message = "disqualified", f"accuracy ratio {ratio} < 0.99"
            elif candidate.precision == "int8":
                trial.throughput *= 1.6
            return trial

        return measure

    good = best_trial(
        list(Search(both, COMMITTED, 1, "throughput", none, Budget(None)).run(measured(0.995))),
        "throughput",
        none,
    )
    assert good is not None and good.candidate.precision == "int8"
    assert good.candidate.label().startswith("onnx int8 mbs 8")
    trials = list(Search(both, COMMITTED, 1, "throughput", none, Budget(None)).run(measured(0.9)))
    best = best_trial(trials, "throughput", none)
    assert best is not None and best.candidate.precision == "fp32"
    assert any(t.status == "disqualified" and t.candidate.precision == "int8" for t in trials)
    args = ["-m", "dlrm", "--precisions", "int8,fp32", "--min-accuracy-ratio", "0.99"]
    options = options_from(_parser().parse_args([*args, "--accuracy-dataset", "digits"]))
    assert options.choice.precisions == ("fp32", "int8")
    assert options.accuracy == AccuracyRule(0.99, "digits")
    assert options_from(_parser().parse_args(args)).accuracy == AccuracyRule(0.99, "generated")
    with pytest.raises(ConfigError, match=r"int8 is judged by accuracy.*--min-accuracy-ratio"):
        options_from(_parser().parse_args(["-m", "dlrm", "--triton-precisions", "int8"]))
    with pytest.raises(ConfigError, match=r"int8 is judged by accuracy"):
        run_tune(TuneOptions(model="dlrm", choice=SpaceChoice(precisions=("int8",))))
    with pytest.raises(ConfigError, match=r"accuracy dataset 'mnist': use digits, generated"):
        AccuracyRule(0.99, "mnist").load(batch_centered_spec())


def test_click_logs_are_drawn_from_the_searched_dlrm() -> None:
    """--accuracy-dataset click-logs: the spec's own generated inputs with clicks drawn from
    its fp32 module, so the zoo's DLRM is judged on the very log models/click_logs.py draws
    from it (test_click_logs.py serves it); a model with two outputs is refused."""
    from pytest_triton.models import click_logs, zoo_spec

    batches, metric = AccuracyRule(0.99, "click-logs").load(zoo_spec("dlrm"))
    logs = click_logs.draw()
    assert metric == "roc_auc" and len(batches) == len(logs) // 256
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), logs.clicks)
    np.testing.assert_array_equal(
        np.concatenate([b[0]["categorical_features"] for b in batches]),
        logs.inputs["categorical_features"],
    )
    with pytest.raises(ConfigError, match=r"click-logs draws clicks from one probability"):
        AccuracyRule(0.99, "click-logs").load(zoo_spec("bert"))


def dataclass_copy(trial: Trial, **changes: object) -> Trial:
    return dataclasses.replace(trial, **changes)  # type: ignore[arg-type]


def test_committed_config_round_trip_and_parsing() -> None:
    config = mc.ModelConfig(name="dlrm", platform="onnxruntime_onnx", max_batch_size=65536)
    config.dynamic_batching.max_queue_delay_microseconds = 1000
    config.instance_group.append(
        mc.ModelInstanceGroup(count=1, kind=mc.ModelInstanceGroup.KIND_GPU)
    )
    committed = sp.from_config(config, "onnx", 1)
    assert committed == Candidate("onnx", 65536, True, 1000, (), 1, None, 0, 1)
    best = Candidate("onnx", 4096, True, 200, (1024, 4096), 2, None, 1, 8)
    out = sp.apply(config, best, "intra_op_thread_count")
    assert out.max_batch_size == 4096 and out.instance_group[0].count == 2
    assert out.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU  # kind kept
    assert list(out.dynamic_batching.preferred_batch_size) == [1024, 4096]
    assert out.parameters["intra_op_thread_count"].string_value == "1"
    assert sp.from_config(out, "onnx", 8) == best
    off = sp.apply(config, Candidate("onnx", 64, False), None)
    assert not off.HasField("dynamic_batching")
    assert sp.parse_preferred("none; 4,8") == ((), (4, 8))
    assert sp.parse_switch("off,on") == (False, True)
    assert sp.parse_kinds("cpu,KIND_GPU") == ("KIND_CPU", "KIND_GPU")
    assert math.isnan(Trial(1, best, "failed").goodput)


# -- real runs ----------------------------------------------------------------------------------
def tune(
    tmp_path: Path, *args: str, timeout: float = 180, batching: str = "off,on", batch: str = "1"
) -> tuple[int, str, Path]:
    out = tmp_path / "tune"
    cmd = [
        sys.executable,
        "-m",
        "pytest_triton.cli.triton_tune",
        *args,
        "-b",
        batch,
        "--max-batch-sizes",
        "16",
        "--dynamic-batching",
        batching,
        "--instance-counts",
        "1",
        "--threads",
        "0",
        "-p",
        "500",
        "--warmup",
        "200",
        # Five half-second windows at most for a point, not ten: on a loaded 2-core machine the
        # windows rarely settle, and what these runs judge (a disqualification, a 2x shortfall)
        # is far wider than five windows' medians can move.
        "--max-trials",
        "5",
        "-o",
        str(out),
    ]
    finished = Locust(cmd, env=subprocess_env()).finish(timeout=timeout)
    return finished.code, finished.output, out


@pytest.mark.load
def test_quick_search_writes_its_files_and_disqualifies_changed_answers(
    tmp_path: Path,
) -> None:
    """A model whose rows are centred on their batch's mean: with dynamic batching, single-row
    requests sent together come back changed, so that configuration is disqualified (never
    measured) with the mismatch; the committed one (no batching) is the best."""
    code, output, out = tune(
        tmp_path,
        "-m",
        "tests.helpers.tune_models:batch_centered_spec",
        "--queue-delays",
        "20000",
        "--concurrency-range",
        "2",
        "--gate-within",
        "50",
        "--slo",
        "500",
        "--json",
        str(tmp_path / "report" / "load-tune-centered.json"),
    )
    assert code == 0, output[-3000:]
    result = json.loads((out / "tune.json").read_text())
    by_status = {c["status"]: c for c in result["candidates"]}
    assert set(by_status) == {"measured", "disqualified"}, result["candidates"]
    dq = by_status["disqualified"]
    assert dq["candidate"]["dynamic_batching"] and dq["throughput"] is None
    assert "parity FAILED" in dq["message"] and "max abs diff" in dq["message"]
    assert result["best"]["committed"] and result["gate"]["passed"] is True
    assert by_status["measured"]["within_slo"] > 0.9  # --slo: its share within 500 ms
    assert "DISQUALIFIED #2" in output and "GATE PASS" in output
    # the one batching candidate changed answers: said once, the unbatched one recommended
    assert "DISQUALIFIED #2: every dynamic-batching candidate changes answers" in output
    assert "recommended: the best unbatched configuration, #1 " in output
    assert "ETA" in output  # the progress line
    header = (out / "candidates.csv").read_text().splitlines()[0]
    assert header.startswith("candidate,committed,status,format,max_batch_size")
    assert "DISQUALIFIED: request 0 of 8 sent together" in (out / "candidates.md").read_text()
    assert (out / "pareto.png").read_bytes()[:8] == PNG
    assert 'backend: "python"' in (out / "config.pbtxt").read_text()
    assert (tmp_path / "report" / "load-tune-centered.json").is_file()


@pytest.mark.load
def test_gate_fails_a_committed_config_that_falls_short(tmp_path: Path) -> None:
    """A model whose execution costs the same whatever its batch, committed without dynamic
    batching: batching 8 concurrent requests serves far more (measured ~2x here), so
    --gate-within 10 exits 1 and says by how much the committed configuration falls short;
    the best config's diff adds the dynamic_batching block."""
    code, output, out = tune(
        tmp_path,
        "-m",
        "tests.helpers.tune_models:fixed_cost_spec",
        "--formats",
        "torchscript-trace",
        "--queue-delays",
        "2000",
        "--concurrency-range",
        "8",
        "--gate-within",
        "10",
        # No confirming re-measurement (11 s of a 25 s run): the shortfall is ~4x, far past
        # what it could move; the quick-search test runs the default --confirm 1.
        "--confirm",
        "0",
    )
    assert code == 1, output[-3000:]
    result = json.loads((out / "tune.json").read_text())
    assert result["gate"]["passed"] is False and result["gate"]["shortfall_percent"] > 10
    assert "GATE FAIL: the committed configuration falls" in output
    assert not result["best"]["committed"] and result["best"]["candidate"]["dynamic_batching"]
    # every measured candidate carries its spread (its windows' throughputs), as the CSV does
    measured = [c for c in result["candidates"] if c["status"] == "measured"]
    assert all(c["spread"] is not None and c["spread"] >= 0 for c in measured), measured
    assert ",spread," in (out / "candidates.csv").read_text().splitlines()[0]
    diff = (out / "config.diff").read_text()
    assert "+dynamic_batching {" in diff and "+  max_queue_delay_microseconds: 2000" in diff


@pytest.mark.load
def test_a_committed_config_that_answers_wrongly_under_load_fails_the_run(tmp_path: Path) -> None:
    """A model right alone and for triton-tune's 8 batched single-row requests, wrong once
    dynamic batching joins its 4-row requests into more than 8 rows: the committed
    configuration (dynamic batching on) passes parity, then answers wrongly under load
    (every answer checked), so it is disqualified naming the wrong answers and their count,
    and the run exits 1."""
    code, output, out = tune(
        tmp_path,
        "-m",
        "tests.helpers.tune_models:wrong_beyond_eight_spec",
        "--formats",
        "torchscript-trace",  # exported in 0.1 s
        "--queue-delays",
        "20000",
        "--concurrency-range",
        "4",
        "--triton-check-every",
        "1",
        "--confirm",
        "0",
        batching="on",
        batch="4",
    )
    assert code == 1, output[-3000:]
    result = json.loads((out / "tune.json").read_text())
    (trial,) = result["candidates"]
    assert trial["committed"] and trial["status"] == "disqualified", trial
    (reason,) = trial["failure_reasons"]
    assert reason["kind"] == "wrong answer" and reason["count"] == trial["failed_requests"] > 0
    assert f"{reason['count']:,} wrong answers" in trial["message"], trial["message"]
    assert "max abs diff" in trial["message"]  # the first wrong answer, in full
    assert "FAIL: the committed configuration failed requests under load" in output


@pytest.mark.slow
@pytest.mark.load
def test_the_export_format_is_a_dimension_of_the_search(tmp_path: Path) -> None:
    """--formats torchscript-trace,torch-export: the quick search starts from the first
    format and tries the same configuration as PyTorch 2's exported program (exported,
    python-hosted, parity-checked and measured like any candidate); the tables name each
    candidate's format and the best one's. `-m slow`: the run took 41 s of CPU (server,
    stubs, generator) on this project's 2-core machine while it compiled beside it;
    test_a_faster_format_is_found_by_the_quick_search is its default-suite half."""
    code, output, out = tune(
        tmp_path,
        "-m",
        "tests.helpers.tune_models:batch_centered_spec",
        "--formats",
        "torchscript-trace,torch-export",
        "--concurrency-range",
        "1",
        "--confirm",
        "0",
        batching="off",
    )
    assert code == 0, output[-3000:]
    result = json.loads((out / "tune.json").read_text())
    tried = {c["candidate"]["format"]: c for c in result["candidates"]}
    assert set(tried) == {"torchscript-trace", "torch-export"}, result["candidates"]
    assert all(c["status"] == "measured" and c["throughput"] > 0 for c in tried.values())
    assert tried["torchscript-trace"]["committed"] and not tried["torch-export"]["committed"]
    rows = (out / "candidates.csv").read_text().splitlines()[1:]
    assert sorted(row.split(",")[3] for row in rows) == ["torch-export", "torchscript-trace"]
    best = result["best"]["candidate"]["format"]
    if best == "torch-export":
        assert "the best candidate serves torch-export, the committed config torchscript-trace" in (
            output
        )


@pytest.mark.load
def test_precision_search_disqualifies_int8_under_the_accuracy_ratio(tmp_path: Path) -> None:
    """fp32 and INT8 of the digits CNN whose INT8 export was calibrated on zeros, judged on
    the held-out digits at 0.99 of fp32 PyTorch's top-1: the fp32 candidate is measured
    with its accuracy ratio beside its throughput; the INT8 one is disqualified naming the
    metric and its ratio, never measured; the best is fp32."""
    lines: list[str] = []
    outcome = run_tune(
        TuneOptions(
            model="tests.helpers.tune_models:digits_zeros_spec",
            request_batch=8,
            choice=SpaceChoice(
                max_batch_sizes=(64,),
                dynamic_batching=(False,),
                instance_counts=(1,),
                threads=(0,),
                concurrencies=(2,),
                precisions=("fp32", "int8"),
            ),
            accuracy=AccuracyRule(0.99, "digits"),
            confirm=0,
            config=resolve(measurement_interval=300.0, load_warmup=100.0),
            output_dir=tmp_path / "tune",
            progress=lines.append,
            bar=False,
        )
    )
    by_precision = {t.candidate.precision: t for t in outcome.trials}
    fp32, int8 = by_precision["fp32"], by_precision["int8"]
    assert fp32.status == "measured" and fp32.throughput > 0, fp32
    assert fp32.accuracy_ratio == 1.0 and fp32.accuracy.startswith("top1 "), fp32.accuracy
    assert int8.status == "disqualified" and math.isnan(int8.throughput), int8
    assert int8.accuracy_ratio < 0.99 and "< 0.99" in int8.message, int8.message
    assert "metric top1 (against labels)" in int8.message
    assert outcome.best is fp32
    summary = "\n".join(outcome.summary())
    assert "disqualified by parity or accuracy" in summary and "accuracy ratio 1.0000" in summary
    table = (tmp_path / "tune" / "candidates.md").read_text()
    assert "| accuracy ratio |" in table and "DISQUALIFIED: accuracy ratio" in table
    header = (tmp_path / "tune" / "candidates.csv").read_text().splitlines()[0]
    assert ",precision," in header and ",accuracy_ratio,accuracy," in header


def docker_with_cpu_image() -> None:
    """Skip unless a Docker engine answers and the offline CPU image is built."""
    try:
        from pytest_triton.server.container import CPU_IMAGE
        from pytest_triton.server.docker_engine import docker_client

        docker_client(timeout_s=10).images.get(CPU_IMAGE)
    except Exception as exc:
        pytest.skip(
            "needs a Docker engine and the offline CPU image: run .ci/docker-engine and "
            f"images/build-cpu-image (CI's container job, make test-container, does): {exc}"
        )


@pytest.mark.container
@pytest.mark.load
def test_quick_search_on_a_container_server(tmp_path: Path) -> None:
    """--triton-launcher container: the candidates are deployed into the offline CPU image's
    server (the repository is mounted, each candidate loaded through the API), checked for
    parity there (the batching candidate is disqualified) and measured."""
    docker_with_cpu_image()
    code, output, out = tune(
        tmp_path,
        "-m",
        "tests.helpers.tune_models:batch_centered_spec",
        "--triton-launcher",
        "container",
        "--queue-delays",
        "20000",
        "--concurrency-range",
        "2",
        "--confirm",
        "0",
        timeout=240,
    )
    assert code == 0, output[-3000:]
    assert "served by the container launcher's server" in output
    result = json.loads((out / "tune.json").read_text())
    statuses = sorted(c["status"] for c in result["candidates"])
    assert statuses == ["disqualified", "measured"], result["candidates"]
    assert result["best"]["committed"] and result["best"]["throughput"] > 0


@pytest.mark.load
def test_tuning_gate_example_runs_from_pytest(tmp_path: Path) -> None:
    """examples/test_tune_gate.py calls tune() from a pytest test against the session's own
    server: skipped without --tune-gate; with it, a tiny search (a 10 s budget, half-second
    windows, any shortfall allowed) runs, passes and joins the gate report."""
    example = str(REPO / "examples" / "test_tune_gate.py")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = warm_start.popen(  # a pytest session like any other, without its imports' cost
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", example, "-v", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=subprocess_env(TRITON_MEASUREMENT_INTERVAL="500", TRITON_LOAD_WARMUP="200"),
        )
        try:
            out, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()  # as subprocess.run does
            raise
        return subprocess.CompletedProcess([example, *args], proc.wait(), out, "")

    skipped = run("-rs")
    assert skipped.returncode == 0 and "run it with --tune-gate" in skipped.stdout, skipped.stdout
    report = tmp_path / "report"
    done = run(
        "-s",
        "--tune-gate",
        "--tune-budget",
        "10",
        "--tune-within",
        "100",
        "--triton-report",
        str(report),
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "1 passed" in done.stdout and "GATE PASS" in output, output[-4000:]
    assert "candidates are served by the external launcher's server" in output
    tuned = json.loads((report / "load-tune-dlrm.json").read_text())
    assert tuned["gate"]["passed"] and tuned["committed"]["status"] == "measured"
    assert "tune-dlrm committed" in (report / "report.md").read_text()
