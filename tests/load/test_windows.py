"""Measurement windows, stability and open-loop schedules: the arithmetic, without a server
(the real-server proofs are in test_measurement.py)."""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import tracemalloc

import numpy as np
import pytest

from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import InferenceError, ServerError, WrongAnswer
from pytest_triton.load.measure.arrivals import Lag, rate_warning, schedule
from pytest_triton.load.measure.failed_requests import FailureReason, failure_reason
from pytest_triton.load.measure.latency_histogram import LatencyHistogram, ms_text
from pytest_triton.load.measure.run_figures import RunRecord, stability_of, warmup_of
from pytest_triton.load.measure.run_verdict import stability_check, window_misses
from pytest_triton.load.measure.targets import Targets
from pytest_triton.load.measure.window_log import SLICE_S, WindowLog
from pytest_triton.load.measure.windows import PERCENTILES, Criterion, Window, assess, merge
from tests.helpers.known_latencies import assert_within_precision, exact_percentile

T0 = 1_000_000.0  # a wall-clock time on a slice boundary


def window(index: int, throughput: float, p99: float, seconds: float = 1.0) -> Window:
    requests = int(throughput * seconds)
    return Window(
        index=index,
        start_s=index - 1.0,
        duration_s=seconds,
        requests=requests,
        failures=0,
        samples=requests,
        avg_ms=p99 / 2,
        p50_ms=p99 / 3,
        p90_ms=p99 * 0.8,
        p95_ms=p99 * 0.9,
        p99_ms=p99,
    )


def test_three_agreeing_windows_are_stable_and_their_merge_is_the_measurement() -> None:
    ws = [window(1, 500, 30), window(2, 1000, 10), window(3, 1020, 10.5), window(4, 990, 9.8)]
    result = assess(ws, Criterion(3, 10.0))
    assert result.stable, result.reason
    assert [w.index for w in result.chosen] == [2, 3, 4]
    m = result.measurement
    assert m is not None and m.requests == 1000 + 1020 + 990
    assert m.throughput == pytest.approx(1003.33, rel=1e-3)
    assert "windows 2-4 agree within 10%" in result.summary()


def test_the_latest_agreeing_group_is_taken() -> None:
    ws = [
        window(1, 1000, 10),
        window(2, 1000, 10),
        window(3, 1000, 10),
        window(4, 2000, 5),
        window(5, 2000, 5),
        window(6, 2000, 5),
    ]
    result = assess(ws, Criterion(3, 10.0))
    assert [w.index for w in result.chosen] == [4, 5, 6]


@pytest.mark.parametrize(
    ("throughputs", "p99s", "what"),
    [
        ([1000, 1300, 1000], [10, 10, 10], "throughput"),  # 1300 is 18% above the mean of 1100
        ([1000, 1000, 1000], [10, 10, 20], "latency"),
    ],
)
def test_windows_that_disagree_on_either_figure_are_unstable(
    throughputs: list[float], p99s: list[float], what: str
) -> None:
    ws = [window(i, t, p) for i, (t, p) in enumerate(zip(throughputs, p99s, strict=True), 1)]
    result = assess(ws, Criterion(3, 10.0))
    assert not result.stable and result.measurement is None
    assert "no 3 consecutive windows of 3 agree within 10%" in result.reason
    spread = result.throughput_spread_pct if what == "throughput" else result.latency_spread_pct
    assert spread > 10


def test_too_few_windows_say_what_to_change() -> None:
    result = assess([window(1, 1000, 10)], Criterion(3, 10.0))
    assert not result.stable
    assert "only 1 complete measurement window(s), 3 needed" in result.reason
    # ... naming the flags and the unit, not only the concepts
    assert "run longer (-t) or shorten the windows (--triton-measurement-interval, in ms)" in (
        result.reason
    )


def test_a_window_without_successes_never_agrees() -> None:
    empty = Window(
        index=3,
        start_s=2,
        duration_s=1,
        requests=5,
        failures=5,
        samples=0,
        avg_ms=math.nan,
        p50_ms=math.nan,
        p90_ms=math.nan,
        p95_ms=math.nan,
        p99_ms=math.nan,
    )
    assert not assess([window(1, 10, 1), window(2, 10, 1), empty], Criterion(3, 10.0)).stable


NOISY = [window(1, 1000, 10), window(2, 800, 12), window(3, 1100, 9), window(4, 850, 13)]
"""Windows 20-30% apart, as a short closed-loop run on a busy 2-core machine gives."""


def test_windows_that_never_agree_are_judged_on_all_of_them() -> None:
    result = assess(NOISY, Criterion(3, 10.0))
    assert not result.stable and result.measurement is None
    judged = result.judged
    assert judged is not None and judged.requests == sum(w.requests for w in NOISY)
    assert judged.p99_ms <= max(w.p99_ms for w in NOISY)


@pytest.mark.parametrize(
    ("limits", "misses"),
    [
        ({"perf_latency_p99": 50, "perf_throughput": 500}, []),
        ({"perf_latency_p99": 12.5}, ["window 4: perf_latency_p99 (ms) measured 13, target <="]),
        ({"perf_throughput": 900}, ["window 2: perf_throughput", "window 4: perf_throughput"]),
        ({"perf_latency_p99": 50, "perf_ttft_p99": 100}, None),  # no window has a TTFT
    ],
)
def test_a_window_that_misses_a_speed_target_is_named(
    limits: dict[str, float], misses: list[str] | None
) -> None:
    """Where every window meets every speed target, the choice of windows cannot change the
    verdict (empty); else each miss is named; None where a target is set that windows do not
    measure (the instability then fails the run, as perf_analyzer's rule would)."""
    found = window_misses(assess(NOISY, Criterion(3, 10.0)), Targets(**limits))
    if misses is None:
        assert found is None
        return
    assert found is not None and len(found) == len(misses), found
    for text, start in zip(found, misses, strict=True):
        assert text.startswith(start), found


def test_the_stability_row_fails_only_where_a_window_misses() -> None:
    unstable = assess(NOISY, Criterion(3, 10.0))
    met = stability_check(unstable, allowed=False, misses=[])
    assert met.passed is None and met.note == "unstable, every window met the targets"
    missed = stability_check(unstable, allowed=False, misses=["window 4: perf_latency_p99 x"])
    assert missed.passed is False
    assert missed.note == "measurement not stable; window 4: perf_latency_p99 x"
    unjudged = stability_check(unstable, allowed=False, misses=None)
    assert unjudged.passed is False and unjudged.note == "measurement not stable"
    assert stability_check(unstable, allowed=True, misses=None).note == "unstable, allowed"


def known_latencies(count: int, seed: int = 7) -> list[float]:
    """A long-tailed distribution of fast requests: median ~2 ms, tail to ~30 ms."""
    rng = np.random.default_rng(seed)
    return [float(v) for v in np.exp(rng.normal(np.log(2.0), 0.6, count))]


def test_percentiles_of_a_known_distribution_are_exact_to_the_histograms_precision() -> None:
    latencies = known_latencies(50_000)
    histogram = LatencyHistogram.of(latencies)
    assert histogram.count == len(latencies)
    for p, value in histogram.percentiles_ms([50, 90, 95, 99, 99.9]).items():
        assert_within_precision(value, exact_percentile(latencies, p))
    assert histogram.percentile_ms(50) < histogram.percentile_ms(99)  # not one ms bucket
    travelled = LatencyHistogram.decode(histogram.encode())  # as workers send them
    assert travelled.count == histogram.count
    assert travelled.percentiles_ms(PERCENTILES) == histogram.percentiles_ms(PERCENTILES)
    assert len(histogram.encode()) < 10_000  # base64 text, msgpack- and JSON-able
    assert [ms_text(v) for v in (2.137, 0.2134, 25.37, 1250.4)] == [
        "2.14",
        "0.213",
        "25.4",
        "1,250",
    ]


def test_counts_percentiles_and_shares_are_hdrhistograms_own() -> None:
    """The vectorized recording, percentiles and share within a bound give what
    HdrHistogram's own record_value, get_percentile_to_value_dict and recorded iterator give:
    the same counts array and the same figures, edge values of its buckets included."""
    from hdrh.histogram import HdrHistogram

    from pytest_triton.load.measure.latency_histogram import HIGHEST_US

    rng = np.random.default_rng(7)
    edges = [0, 1, 2047, 2048, 2049, 4095, 4096, 1_000_000, HIGHEST_US]
    for sigma in (0.1, 1.0, 2.5):
        values = [min(int(v), HIGHEST_US) for v in rng.lognormal(8, sigma, 3000)] + edges
        theirs = HdrHistogram(1, HIGHEST_US, 3)
        ours = LatencyHistogram()
        for v in values:
            theirs.record_value(v)
            ours.record_us(v)
        live = ours._live()
        assert list(live.counts) == list(theirs.counts)
        assert (live.total_count, live.min_value, live.max_value) == (
            theirs.total_count,
            theirs.min_value,
            theirs.max_value,
        )
        percents = [0, 50, 90, 99, 99.9, 100]
        expected = theirs.get_percentile_to_value_dict(percents)
        assert ours.percentiles_ms(percents) == {p: expected[p] / 1e3 for p in percents}
        for bound_ms in (0.001, 2.048, 3.0, 50.0):
            within = sum(
                item.count_at_value_iterated_to
                for item in theirs.get_recorded_iterator()
                if theirs.get_lowest_equivalent_value(item.value_iterated_to) <= bound_ms * 1e3
            )
            assert ours.share_within_ms(bound_ms) == within / len(values)


def test_window_log_windows_hold_the_percentiles_of_their_requests() -> None:
    """A known latency distribution through the WindowLog: each window's percentiles and
    those of the merged stable windows are the exact ones of their requests, to within the
    histogram's precision (no whole-ms rounding: p50 2.0x ms, p99 ~8 ms, both below 10)."""
    log = WindowLog()
    latencies = known_latencies(24_000, seed=11)
    per_slice = 300  # 1200 requests/s for 20 s
    by_window: dict[int, list[float]] = {}
    for i, latency in enumerate(latencies):
        k, j = divmod(i, per_slice)
        log.record(T0 + k * SLICE_S + j * SLICE_S / per_slice, "m", latency, True, 2)
        if k >= 4:  # after the 1 s warm-up: windows of 2 s = 8 slices
            by_window.setdefault((k - 4) // 8 + 1, []).append(latency)
    windows = log.windows(T0, T0 + 20, warmup_s=1.0, interval_s=2.0)
    assert [w.index for w in windows] == list(range(1, 10))
    for w in windows:
        exact = by_window[w.index]
        assert w.requests == len(exact) == 2400 and w.samples == 4800
        assert w.avg_ms == pytest.approx(sum(exact) / len(exact))
        for p in PERCENTILES:
            assert_within_precision(w.latency(p), exact_percentile(exact, p))
        assert w.p50_ms < w.p90_ms < w.p99_ms < 10
        assert not float(w.p50_ms).is_integer()
    chosen = windows[-3:]
    merged = merge(chosen)
    together = [v for w in chosen for v in by_window[w.index]]
    assert merged.requests == len(together) and merged.histogram is not None
    for p in PERCENTILES:  # the merge's percentiles are those of all its requests
        assert_within_precision(merged.latency(p), exact_percentile(together, p))
    assert merged.avg_ms == pytest.approx(sum(together) / len(together))
    whole = log.total("m")
    assert whole.requests == len(latencies)
    assert_within_precision(whole.histogram.percentile_ms(99), exact_percentile(latencies, 99))
    # a window read back from its JSON keeps its histogram, so merges stay exact
    again = [Window.from_dict(w.as_dict()) for w in chosen]
    assert merge(again).p99_ms == merged.p99_ms


def test_window_log_cuts_time_windows_after_the_warmup() -> None:
    log = WindowLog()
    # 10 requests per slice for 20 s, 2 ms each (samples: batch 4); one failure at 3 s
    for k in range(int(20 / SLICE_S)):
        for j in range(10):
            ok = not (k == 12 and j == 0)
            log.record(T0 + k * SLICE_S + j * 0.01, "m", 2.0, ok=ok, samples=4)
    windows = log.windows(T0, T0 + 20, warmup_s=1.0, interval_s=5.0)
    assert [w.index for w in windows] == [1, 2, 3]  # 1..6, 6..11, 11..16 s; 16..20 incomplete
    first = windows[0]
    assert first.duration_s == 5.0 and first.start_s == 0.0
    assert first.requests == 200 and first.failures == 1
    assert first.samples == 199 * 4 and first.throughput == pytest.approx(199 * 4 / 5)
    assert first.p99_ms == 2.0 and first.avg_ms == pytest.approx(2.0)


def test_the_warmup_lasts_until_the_request_rate_settles() -> None:
    """The issue's 20-second DLRM run: slow for its first 3 s (a JIT-compiling backend), 5 s
    windows; measured from 1 s, its first window holds the slow seconds and no three agree."""
    log = WindowLog()
    for k in range(int(20 / SLICE_S)):
        for j in range(2 if k < 3 / SLICE_S else 10):
            log.record(T0 + k * SLICE_S + j * 0.01, "m", 2.0, ok=True, samples=1)
    settled = log.settled_after(T0, T0 + 20, minimum_s=1.0, latest_s=5.0, tolerance_pct=10)
    assert settled == 3.0
    criterion = Criterion(windows=3, tolerance_pct=10)
    assert not assess(log.windows(T0, T0 + 20, warmup_s=1.0, interval_s=5.0), criterion).stable
    assert assess(log.windows(T0, T0 + 20, warmup_s=settled, interval_s=5.0), criterion).stable
    # a rate that keeps changing never settles, nor does one that settles too late
    assert log.settled_after(T0, T0 + 20, minimum_s=1.0, latest_s=2.0, tolerance_pct=10) is None
    slowing = WindowLog()
    for k in range(int(20 / SLICE_S)):
        for j in range(round(40 * 0.97**k)):  # 11% slower every second
            slowing.record(T0 + k * SLICE_S + j * 0.001, "m", 2.0, ok=True, samples=1)
    assert slowing.settled_after(T0, T0 + 20, minimum_s=1.0, latest_s=5.0, tolerance_pct=10) is None


def falling_then_steady(begun: float, seconds: float) -> WindowLog:
    """A load that starts off the slices' grid and slows for 3 s (100, 80, 60 req/s), then
    holds 30 req/s."""
    log = WindowLog()
    for second in range(math.ceil(seconds)):
        rate = (100, 80, 60)[second] if second < 3 else 30
        for j in range(rate):
            if second + j / rate < seconds:
                log.record(begun + second + j / rate, "m", 2.0, ok=True, samples=1)
    return log


def test_a_warmup_off_the_slices_grid_settles() -> None:
    """Steps measured from a start off the grid took a partial slice at both ends (5 slices
    against 4.5: 11% apart at a steady rate), so a steady rate never settled within 10%."""
    begun = T0 + 0.3
    log = falling_then_steady(begun, 8.0)
    assert log.settled_after(begun, begun + 8, minimum_s=1.0, latest_s=5.0, tolerance_pct=10) == 3


def test_a_warmup_that_settles_late_leaves_the_windows_stability_needs() -> None:
    """Three windows of 2 s after a warm-up of 3 s fit a 9.1-s run on paper, but the windows
    are whole slices: from 3.3 s, rounded up to 3.5, they would end at 9.5, past the last
    whole slice (9.25), and only two fit (a full suite's gate run reported "only 2 complete
    measurement windows"). The warm-up may only go on while the windows still fit."""
    begun = T0 + 0.3
    log = falling_then_steady(begun, 9.1)
    config = resolve(load_warmup=1000.0, measurement_interval=2000.0)
    record = RunRecord(config, None, 0, 0, 0, 9.1, log, begun, begun + 9.1)
    warmup = warmup_of(record)
    assert warmup is not None and warmup.seconds == 1.0 and not warmup.settled, warmup
    stability = stability_of(record, warmup)
    assert stability is not None and len(stability.windows) == 3, stability


def test_window_log_cuts_count_windows_for_slow_models() -> None:
    log = WindowLog()
    for k in range(40):  # one request every 0.5 s (every second slice)
        log.record(T0 + k * 0.5 + 0.1, "m", 100.0, ok=True, samples=1)
    windows = log.windows(
        T0, T0 + 19, warmup_s=0.0, interval_s=5.0, mode="count_windows", request_count=10
    )
    assert [w.requests for w in windows] == [10, 10, 10]  # the 4th would end at 19.6 s
    assert all(w.duration_s == pytest.approx(5.0, abs=0.5) for w in windows)


def test_the_first_request_not_the_test_start_begins_the_load() -> None:
    """Workers forked on a busy machine may answer their first request seconds after
    Locust's test start: counting the warm-up from that start would measure empty windows."""
    log = WindowLog()
    assert log.first_at is None
    for k in range(int(3 / SLICE_S), int(10 / SLICE_S)):  # requests from 3 s to 10 s
        log.record(T0 + k * SLICE_S + 0.01, "m", 2.0, ok=True, samples=1)
    assert log.first_at == pytest.approx(T0 + 3.0)
    from_start = log.windows(T0, T0 + 10, warmup_s=0.5, interval_s=1.0)
    assert from_start[0].requests == 0  # what the test start alone would measure
    from_load = log.windows(max(T0, log.first_at), T0 + 10, warmup_s=0.5, interval_s=1.0)
    assert len(from_load) == 6 and all(w.requests == 4 for w in from_load)


def test_workers_logs_merge_into_the_masters() -> None:
    master, worker_a, worker_b = WindowLog(), WindowLog(), WindowLog()
    for t in range(8):
        worker_a.record(T0 + t, "m", 10.0, True, 1)
        worker_b.record(T0 + t, "m", 30.0, True, 1)
    master.merge(worker_a.take_unsent())
    master.merge(worker_b.take_unsent())
    assert worker_a.take_unsent()["slices"] == {}  # sent once
    (w,) = master.windows(T0, T0 + 8, warmup_s=0, interval_s=8)
    assert w.requests == 16 and w.avg_ms == pytest.approx(20.0)
    assert_within_precision(w.p50_ms, 10.0)
    assert_within_precision(w.p99_ms, 30.0)


def test_workers_histograms_merge_exactly_into_the_masters() -> None:
    """Two workers with different latencies: the master's windows hold the percentiles of
    all their requests together, as one process logging everything would."""
    master, alone = WindowLog(), WindowLog()
    workers = [WindowLog(), WindowLog()]
    everything: list[float] = []
    for n, worker in enumerate(workers):
        for i, latency in enumerate(known_latencies(4000, seed=n)):
            at = T0 + i * 0.002
            worker.record(at, "m", latency * (1 + 2 * n), True, 1)  # worker 1 is 3x slower
            alone.record(at, "m", latency * (1 + 2 * n), True, 1)
            everything.append(latency * (1 + 2 * n))
            if i % 1500 == 0:  # reports every 3 s, as Locust's workers send them
                master.merge(worker.take_unsent())
        master.merge(worker.take_unsent())
    (mine,) = master.windows(T0, T0 + 8, warmup_s=0, interval_s=8)
    (theirs,) = alone.windows(T0, T0 + 8, warmup_s=0, interval_s=8)
    assert mine.requests == theirs.requests == 8000
    assert mine.avg_ms == pytest.approx(theirs.avg_ms)  # sums added in another order
    assert {**mine.as_dict(), "avg_ms": 0} == {**theirs.as_dict(), "avg_ms": 0}
    for p in PERCENTILES:
        assert_within_precision(mine.latency(p), exact_percentile(everything, p))
    assert master.total().histogram.percentiles_ms(PERCENTILES) == (
        alone.total().histogram.percentiles_ms(PERCENTILES)
    )


def test_past_slices_are_kept_compact() -> None:
    """An HdrHistogram holds ~190 kB of counters: past slices keep only their encoded text,
    and histograms let go are freed at once (not left to the cyclic garbage collector)."""
    gc.disable()
    tracemalloc.start()
    try:
        log = WindowLog()
        for k in range(2000):  # 500 s of slices, 20 requests each
            for j in range(20):
                log.record(T0 + k * SLICE_S + j * 0.01, "m", 1.0 + j * 0.1 + k * 1e-4, True, 1)
        windows = log.windows(T0, T0 + 500, warmup_s=0, interval_s=5)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    assert len(windows) == 100 and all(w.requests == 400 for w in windows)
    assert held < 20e6, f"{held / 1e6:.0f} MB for 2000 slices"  # 2000 x 190 kB = 380 MB


def test_merge_weights_windows_by_their_requests() -> None:
    """Windows without histograms (read from an older report): the weighted mean."""
    m = merge([window(1, 100, 10), window(2, 300, 20)])
    assert m.requests == 400 and m.p99_ms == pytest.approx((100 * 10 + 300 * 20) / 400)


def test_constant_and_poisson_schedules_hold_the_rate() -> None:
    constant = list(itertools.islice(schedule(50.0, start=10.0), 5))
    assert constant == pytest.approx([10.0, 10.02, 10.04, 10.06, 10.08])
    due = list(itertools.islice(schedule(200.0, "poisson", seed=7), 20_001))
    gaps = [b - a for a, b in itertools.pairwise(due)]
    assert statistics.mean(gaps) == pytest.approx(1 / 200, rel=0.03)
    assert statistics.stdev(gaps) == pytest.approx(1 / 200, rel=0.05)  # exponential: sd = mean
    assert list(itertools.islice(schedule(200.0, "poisson", seed=7), 3)) == due[:3]


@pytest.mark.parametrize(
    ("rate", "distribution"),
    [(0, "constant"), (-1, "constant"), (math.inf, "constant"), (5, "uniform")],
)
def test_bad_schedules_are_refused(rate: float, distribution: str) -> None:
    with pytest.raises(ValueError, match=r"request rate|distribution"):
        next(schedule(rate, distribution))  # type: ignore[arg-type]


def test_lag_and_achieved_rate_warn_when_the_generator_falls_behind() -> None:
    lag = Lag(rate=100)
    for _ in range(990):
        lag.record(0.0005)
    assert not lag.behind and rate_warning(100, 99, lag) is None
    for _ in range(20):
        lag.record(0.050)
    assert lag.behind and lag.late == 20
    warning = rate_warning(100, 99, lag)
    assert warning is not None and "20 of 1010 sends" in warning
    low = rate_warning(100, 80)
    assert low is not None and "achieved 80.0 req/s of the 100.0 req/s asked" in low


def test_failed_requests_are_counted_by_reason_per_window_and_across_workers() -> None:
    """Each kind of failure from what the users report; a worker's slices carry their
    reasons to the master; a window's JSON has its reasons, the first example of each."""
    wrong = WrongAnswer("wrong answer: model 'm': output 'y' differs")
    refused = InferenceError("m", "http", "[request id: 7] refused: input < 0\nAt: model.py")
    timeout = InferenceError("m", "http", "no answer within 1s", cause="timeout")
    reset = InferenceError("m", "grpc", "dropped the connection", cause="connection")
    not_sent = InferenceError("m", "http", "not sent: the model name is empty", cause="client")
    assert failure_reason(wrong) == FailureReason("wrong answer")
    assert failure_reason(refused) == FailureReason("server error", "refused: input < 0")
    assert failure_reason(timeout) == FailureReason("timeout")
    assert (
        failure_reason(reset) == failure_reason(ServerError("died")) == FailureReason("connection")
    )
    assert failure_reason(not_sent) == FailureReason("client error", "not sent")
    assert failure_reason(KeyError("x")) == FailureReason("client error", "KeyError")
    worker, master = WindowLog(), WindowLog()
    for i, error in enumerate([wrong, wrong, refused, None, timeout]):
        worker.record(100.0 + i * 0.01, "m", 1.0, error is None, 1, error)
    master.merge(worker.take_unsent())
    (window,) = master.windows(100.0, 100.25, warmup_s=0, interval_s=0.25)
    assert window.failures == 4 and window.reasons is not None
    assert (
        window.reasons.summary()
        == "2 wrong answers; 1 server error: refused: input < 0; 1 timeouts"
    )
    listed = window.as_dict()["failure_reasons"]
    assert [(r["kind"], r["count"]) for r in listed] == [
        ("wrong answer", 2),
        ("server error", 1),
        ("timeout", 1),
    ]
    assert (
        listed[0]["example"] == str(wrong)
        and listed[1]["reason"] == "server error: refused: input < 0"
    )
    again = Window.from_dict(window.as_dict())
    assert again.reasons is not None and again.reasons.counts == window.reasons.counts
    assert merge([window, again]).reasons.total == 8  # type: ignore[union-attr]
