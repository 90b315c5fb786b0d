"""The agreement rate of a reduced-precision variant under load (--triton-min-agreement),
without a server: the scorer, the verdict's row with its N, the run summary's line, and
triton-perf's verdict, which no load level passes under the target."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.setting_sources import from_environ
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.run_report import agreement_text
from pytest_triton.load.perf.points import Point
from pytest_triton.load.perf.report import agreement_line, sweep_verdict
from pytest_triton.load.runner.agreement import top1_agreement


def measured(agreement: float, samples: int) -> tg.Measured:
    return tg.Measured(
        requests=100,
        failures=0,
        samples=1600,
        duration_s=3.0,
        avg_ms=2.0,
        p95_ms=3.0,
        p99_ms=4.0,
        answer_agreement=agreement,
        agreement_samples=samples,
    )


def test_the_scorer_needs_every_output_s_best_class() -> None:
    reference = {"a": np.eye(3, dtype=np.float32), "b": np.eye(3, dtype=np.float32)[::-1]}
    score = top1_agreement(reference)
    served = {"a": np.eye(3, dtype=np.float32), "b": np.eye(3, dtype=np.float32)}
    np.testing.assert_array_equal(score(served, reference), [0.0, 1.0, 0.0])  # b agrees on row 1
    with pytest.raises(ConfigError, match=r"outputs \['output'\] have one value per sample"):
        top1_agreement({"output": np.zeros((4, 1), np.float32)})


def test_the_verdict_judges_the_rate_and_names_its_n() -> None:
    targets = tg.Targets(answer_agreement=0.99)
    (row,) = [c for c in tg.evaluate(targets, measured(0.95, 800)) if c.name == "answer_agreement"]
    assert row.passed is False and row.kind == "min"
    table = tg.verdict_table([row])
    assert (
        "RESULT: FAIL - answer_agreement measured 0.95, target >= 0.99 "
        "(top-1 agreement with the fp32 reference, N=800 samples)"
    ) in table
    (ok,) = [c for c in tg.evaluate(targets, measured(0.995, 800)) if c.name == "answer_agreement"]
    assert ok.passed is True
    (none,) = [c for c in tg.evaluate(targets, measured(np.nan, 0)) if c.name == "answer_agreement"]
    assert none.passed is False and none.note == "not measured"
    assert "answer_agreement" not in {
        c.name for c in tg.evaluate(tg.Targets(), measured(np.nan, 0))
    }


def test_the_summary_line_says_rate_n_and_target() -> None:
    assert agreement_text(measured(0.995, 800), 0.99).endswith(
        "796 of N=800 samples agree, rate 0.9950, target >= 0.99: met"
    )
    assert agreement_text(measured(0.5, 800), 0.99).endswith("target >= 0.99: MISSED")
    assert "no answer's values were compared" in agreement_text(measured(np.nan, 0), 0.99)


def test_the_setting_is_one_declaration_for_every_load_front() -> None:
    for front in ("locust", "perf", "tune"):
        config = resolve(from_environ({"TRITON_MIN_AGREEMENT": "0.99"}, front))
        assert config.gate.answer_agreement == 0.99
    with pytest.raises(ValueError, match=r"TRITON_MIN_AGREEMENT: expected a ratio in 0\.\.1"):
        resolve(from_environ({"TRITON_MIN_AGREEMENT": "99"}, "locust"))


def test_triton_perf_fails_a_sweep_with_any_point_under_the_target() -> None:
    base = dict(
        batch_size=16, concurrency=1, duration_s=2.0, requests=100, failures=0, avg_ms=2.0,
        p50_ms=2.0, p90_ms=3.0, p95_ms=3.0, p99_ms=4.0,
    )  # fmt: skip
    good = Point(**base, answer_agreement=0.995, agreement_samples=1600)  # type: ignore[arg-type]
    bad = Point(**{**base, "concurrency": 2}, answer_agreement=0.9, agreement_samples=1600)  # type: ignore[arg-type]
    config = resolve(from_environ({"TRITON_MIN_AGREEMENT": "0.99"}, "perf"))
    verdict = sweep_verdict([good, bad], config)
    assert verdict is not None and not verdict["passed"]
    assert verdict["points"][0]["passed"] and not verdict["points"][1]["passed"]
    assert verdict["targets"]["answer_agreement"] == 0.99
    assert agreement_line(bad) == [
        "batch 16 concurrency 2: answers judged by top-1 agreement with the fp32 reference: "
        "1440 of N=1600 samples agree, rate 0.9000"
    ]


def test_with_the_target_answers_are_compared_against_a_host_too() -> None:
    """The target says the locustfile's reference is the deployed model's fp32 PyTorch."""
    from pytest_triton.load.runner.checking import DEFAULT_CHECK_EVERY, answers_every

    host = "http://127.0.0.1:8000"
    config = resolve(from_environ({"TRITON_MIN_AGREEMENT": "0.99"}, "locust"))
    assert answers_every(config, host) == DEFAULT_CHECK_EVERY
    assert answers_every(resolve(from_environ({}, "locust")), host) == 0
    every = resolve(
        from_environ({"TRITON_MIN_AGREEMENT": "0.99", "TRITON_CHECK_EVERY": "1"}, "locust")
    )
    assert answers_every(every, host) == 1
