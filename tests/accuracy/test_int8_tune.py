"""Where INT8 pays on this CPU, through the whole search: triton-tune with precision as a
dimension (fp32, int8) under MLPerf's 0.99 rule, on the zoo's full-size DLRM (its top MLP's
1024-wide Gemms carry the cost: dynamic INT8 runs them 1.8-2x faster here) judged by ROC AUC
on click logs drawn from its own fp32 weights (--accuracy-dataset click-logs), picks the INT8
variant with its accuracy ratio beside its throughput. A real run on the bundled
tritonserver; minutes (the 293 MB of tables are exported and quantized), so `-m slow`:

    python -m pytest tests/accuracy/test_int8_tune.py -m slow -s
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.load.tune.accuracy_rule import AccuracyRule
from pytest_triton.load.tune.tuner import SpaceChoice, TuneOptions
from pytest_triton.load.tune.tuner import tune as run_tune


@pytest.mark.slow
@pytest.mark.load
def test_triton_tune_picks_int8_for_the_full_dlrm(tmp_path: Path) -> None:
    def said(line: str) -> None:  # shown as it comes with -s: a run of minutes
        print(f"[triton-tune] {line}", flush=True)

    outcome = run_tune(
        TuneOptions(
            model="dlrm",
            size="full",
            request_batch=512,
            choice=SpaceChoice(  # the zoo's serving settings; precision is what is searched
                max_batch_sizes=(65536,),
                dynamic_batching=(True,),
                queue_delays_us=(1000,),
                instance_counts=(1,),
                threads=(1,),
                concurrencies=(2,),
                precisions=("fp32", "int8"),
            ),
            accuracy=AccuracyRule(0.99, "click-logs"),
            confirm=1,
            config=resolve(measurement_interval=3000.0),
            output_dir=tmp_path / "tune",
            progress=said,
            bar=False,
        )
    )
    print("\n".join(outcome.summary()))
    measured = sorted(
        (t for t in outcome.trials if t.status == "measured"), key=lambda t: t.throughput
    )
    fp32, int8 = ({t.candidate.precision: t for t in measured}[p] for p in ("fp32", "int8"))
    assert int8.accuracy.startswith("roc_auc ") and 0.99 <= int8.accuracy_ratio <= 1.01
    assert outcome.best is not None and outcome.best.candidate.precision == "int8", (
        f"fp32 {fp32.throughput:.0f}/s, int8 {int8.throughput:.0f}/s"
    )
    table = (tmp_path / "tune" / "candidates.md").read_text()
    assert "| accuracy ratio |" in table and "onnx int8" in table
