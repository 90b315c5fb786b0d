"""The streams' log without a load run: slices, spans, goodput, the workers' reports, and the
goodput target refused without an SLO."""

from __future__ import annotations

import math

import pytest

from pytest_triton.base.config_resolution import check_stream_goodput, resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.load.measure.stream_log import StreamLog


def test_a_span_counts_the_streams_that_ended_in_it() -> None:
    log = StreamLog()
    log.record(100.2, 0.010, [0.001, 0.003], 0.014, 3, good=True)
    log.record(101.5, 0.030, [0.002], 0.032, 2)
    log.record_failed(101.7)
    log.record(103.1, 0.5, [], 0.5, 1)  # outside the span
    figures = log.figures(100.0, 102.0)
    assert figures is not None
    assert (figures.streams, figures.tokens, figures.failed, figures.good) == (2, 5, 1, 1)
    assert figures.duration_s == 2.0 and figures.output_tokens_per_s == 2.5
    assert figures.goodput == pytest.approx(1 / 3)
    assert figures.ttft_ms[99.0] == pytest.approx(30.0, rel=1e-3)
    assert figures.itl_ms[50.0] == pytest.approx(2.0, rel=1e-3)  # every gap is one value
    assert figures.e2e_ms[50.0] == pytest.approx(14.0, rel=1e-3)
    assert log.figures(104.0, 106.0) is None


def test_workers_reports_add_up_on_the_master() -> None:
    worker, master = StreamLog(), StreamLog()
    worker.record(10.5, 0.01, [0.001], 0.02, 2, good=True)
    master.add_sent(worker.take_unsent())
    assert worker.take_unsent() == {}  # sent once
    worker.record(10.7, 0.02, [0.002], 0.03, 2)
    worker.record_failed(10.8)
    master.add_sent(worker.take_unsent())
    figures = master.figures(10.0, 11.0)
    assert figures is not None
    assert (figures.streams, figures.tokens, figures.failed, figures.good) == (2, 4, 1, 1)
    assert figures.ttft_ms[99.0] == pytest.approx(20.0, rel=1e-3)


def test_checked_and_mismatched_streams_add_up_across_workers() -> None:
    """The whole run's counts (warm-up included) reach the master, checked streams too."""
    workers, master = [StreamLog(), StreamLog()], StreamLog()
    workers[0].record(10.5, 0.01, [0.001], 0.02, 2, checked=True)
    workers[0].record(11.5, 0.01, [0.001], 0.02, 2)
    workers[1].record_failed(12.5, checked=True, mismatched=True)
    workers[1].record_failed(12.6)  # an error: not compared
    for worker in workers:
        master.add_sent(worker.take_unsent())
    total = master.total()
    assert (total.streams, total.failed, total.tokens) == (2, 2, 4)
    assert (total.checked, total.mismatched) == (2, 1)
    assert (master.first_at, master.last_at) == (10.0, 13.0)
    assert StreamLog().first_at is None and StreamLog().total().streams == 0


def test_goodput_without_a_stream_is_not_a_number() -> None:
    log = StreamLog()
    log.record_failed(5.5)
    figures = log.figures(5.0, 6.0)
    assert figures is not None and figures.goodput == 0.0
    assert math.isnan(figures.ttft_ms[99.0])


def test_a_stream_goodput_target_needs_an_slo() -> None:
    with pytest.raises(ConfigError, match="give --perf-slo-ttft-ms and/or --perf-slo-itl-ms"):
        check_stream_goodput(resolve().with_overrides({"perf_stream_goodput": 0.9}))
    check_stream_goodput(
        resolve().with_overrides({"perf_stream_goodput": 0.9, "perf_slo_itl_ms": 5})
    )
