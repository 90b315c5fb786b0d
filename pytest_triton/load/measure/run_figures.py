"""Step 2 of a run's verdict (measure -> figures -> targets -> verdict -> report): the figures
of a finished run, computed from its record alone.

`RunRecord` is what the run left, read once from Locust at its end (load/runner/record.py);
`run_figures` turns it into `RunFigures`: the warm-up, the client's figures, the measurement
windows and their stability, each stage of a traffic shape, the soak, the model update. Pure:
no locust, no clock, no files.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_triton.base.config import TritonConfig
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.arrivals import Lag
from pytest_triton.load.measure.failed_requests import FailureTally
from pytest_triton.load.measure.goodput import goodput_between
from pytest_triton.load.measure.server_side import ModelReport
from pytest_triton.load.measure.soak import SoakFigures, SoakSample, soak_figures
from pytest_triton.load.measure.stages import Stage, StageResult, judge_stages
from pytest_triton.load.measure.stream_log import StreamFigures, StreamLog
from pytest_triton.load.measure.window_log import Slice, WindowLog
from pytest_triton.load.measure.windows import PERCENTILES, Criterion, Stability, assess

# How much longer than --triton-load-warmup a warm-up may last while the rate settles.
MAX_SETTLE_S = 30.0


@dataclass(frozen=True)
class RunRecord:
    """What a finished run left: Locust's totals, every request by slice, the run's clock,
    its shape, soak samples, update and server reports; plain data."""

    config: TritonConfig
    host: str | None
    requests: int  # Locust's totals (every worker's)
    failures: int
    wrong_answers: int
    duration_s: float  # first request to last, as Locust's statistics saw them
    log: WindowLog | None  # every request by 250 ms slice (None before a run)
    started_at: float  # wall clock, as the log keys requests; 0.0 before a run
    stopped_at: float  # the stop, or the time of recording if it had not stopped
    stages: Sequence[Stage] | None = None  # a shaped run's stages (--triton-shape)
    shape_started_at: float = 0.0
    soak_samples: Sequence[SoakSample] | None = None  # None: no soak scraping
    update: Mapping[str, Any] | None = None  # --triton-update-to's figures
    offsets: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # worker clocks
    reports: Sequence[ModelReport] = ()  # the server's view, per model
    cpu_percent: float | None = None  # the load generator's CPU
    cpu_warning: bool = False
    lag: Lag | None = None  # an open loop's schedule lag
    stream_log: StreamLog | None = None  # decoupled models' token timings (StreamUser)
    answers_checked: int | None = None  # answers judged against the reference (None: unchecked)
    failure_reasons: FailureTally = field(default_factory=FailureTally)  # the whole run's
    agreed: float = 0.0  # --triton-min-agreement: compared samples that agree (every process's)
    agreement_samples: int = 0  # compared samples judged by agreement


@dataclass(frozen=True)
class Warmup:
    """The run's warm-up: from the load's first request, `seconds` long; `settled` says whether
    the request rate had settled then (None: not looked for, --triton-fixed-warmup)."""

    begun: float
    seconds: float
    settled: bool | None

    def text(self) -> str:
        how = {
            None: "fixed",
            True: "until the request rate settled",
            False: "the rate had not settled by then",
        }[self.settled]
        return f"warm-up {self.seconds:.1f}s ({how})"


@dataclass(frozen=True)
class RunFigures:
    """Everything the verdict judges and the report shows, for one run."""

    record: RunRecord
    measured: tg.Measured  # the whole run, with goodput and the soak's figures
    warmup: Warmup | None
    stability: Stability | None  # None for a shaped run (each stage is judged instead)
    stages: list[StageResult] | None
    soak: SoakFigures | None
    streams: StreamFigures | None  # the streams that ended after the warm-up
    requests_outside_run: int

    @property
    def basis(self) -> tg.Rates:
        """What targets are judged on: the stable windows' measurement, else all the windows
        (windows.Stability.judged), else (no window completed) the whole run."""
        judged = self.stability.judged if self.stability is not None else None
        return judged if judged is not None else self.measured


def run_figures(record: RunRecord) -> RunFigures:
    warmup = warmup_of(record)
    span = None if warmup is None else (warmup.begun + warmup.seconds, record.stopped_at)
    soak = (
        soak_figures(record.soak_samples, record.log, *span)
        if record.soak_samples is not None and span is not None
        else None
    )
    measured = client_figures(record)
    slo = record.config.gate.perf_slo_ms
    if record.log is not None and span is not None and slo is not None:
        measured = dataclasses.replace(measured, goodput=goodput_between(record.log, *span, slo))
    if soak is not None:
        measured = dataclasses.replace(
            measured,
            memory_growth_mb_per_min=soak.memory_growth_mb_per_min,
            p99_drift_pct=soak.p99_drift_pct,
        )
    streams = (
        record.stream_log.figures(*span)
        if record.stream_log is not None and span is not None
        else None
    )
    if streams is not None:
        gate = record.config.gate
        measured = dataclasses.replace(
            measured,
            ttft_p99_ms=streams.ttft_ms[99.0],
            itl_p99_ms=streams.itl_ms[99.0],
            output_tokens_per_s=streams.output_tokens_per_s,
            stream_goodput=(
                streams.goodput if gate.perf_slo_ttft_ms or gate.perf_slo_itl_ms else math.nan
            ),
        )
    return RunFigures(
        record=record,
        measured=measured,
        warmup=warmup,
        stability=stability_of(record, warmup),
        stages=stage_results(record),
        soak=soak,
        streams=streams,
        requests_outside_run=requests_outside_run(record),
    )


def client_figures(record: RunRecord) -> tg.Measured:
    """Requests and duration from Locust's (aggregated) statistics; latencies (us
    resolution) and samples from the request log, whose histograms the workers send with
    their reports (request events report bytes as their response length, not samples).
    Locust's own percentiles, whole ms below 100 ms, stay in its UI."""
    logged = record.log.total() if record.log is not None else Slice()
    pct = logged.histogram.percentiles_ms(PERCENTILES)
    avg_ms = logged.avg_ms
    if record.requests and record.failures >= record.requests:
        # every request failed: their latencies are no answer's, so none is reported
        pct, avg_ms = dict.fromkeys(pct, math.nan), math.nan
    return tg.Measured(
        requests=record.requests,
        failures=record.failures,
        samples=logged.samples,
        duration_s=record.duration_s,
        avg_ms=avg_ms,
        p95_ms=pct[95],
        p99_ms=pct[99],
        p50_ms=pct[50],
        wrong_answers=record.wrong_answers,
        answer_agreement=(
            record.agreed / record.agreement_samples if record.agreement_samples else math.nan
        ),
        agreement_samples=record.agreement_samples,
    )


def warmup_of(record: RunRecord) -> Warmup | None:
    """The warm-up not measured: at least --triton-load-warmup, then (unless
    --triton-fixed-warmup) whole seconds more until the request rate settles, leaving room
    for the windows a stable measurement needs (None before a run)."""
    log = record.log
    if log is None or not record.started_at:
        return None
    c = record.config.measurement
    begun = max(record.started_at, log.cleared_at, log.first_at or 0.0)  # from load's start
    minimum = c.load_warmup / 1e3
    if c.fixed_warmup or record.stages is not None:
        return Warmup(begun, minimum, None)
    end = record.stopped_at
    # The windows are cut on whole slices (the warm-up's end rounded up to one, the run's end
    # down): up to two slices of the room are not measured.
    room = end - begun - c.stability_windows * c.measurement_interval / 1e3 - 2 * log.slice_s
    if c.measurement_mode != "time_windows":
        room = end - begun - 3.0
    settled = log.settled_after(
        begun,
        end,
        minimum_s=minimum,
        latest_s=min(room, minimum + MAX_SETTLE_S),
        tolerance_pct=c.stability_percentage,
    )
    return Warmup(begun, minimum if settled is None else settled, settled is not None)


def stability_of(record: RunRecord, warmup: Warmup | None) -> Stability | None:
    """The run cut into measurement windows after its warm-up, and whether they agree (not
    asked of a shaped run: its load changes by design, each stage is judged instead)."""
    if record.log is None or warmup is None or record.stages is not None:
        return None
    c = record.config.measurement
    windows = record.log.windows(
        warmup.begun,
        record.stopped_at,
        warmup_s=warmup.seconds,
        interval_s=c.measurement_interval / 1e3,
        mode=c.measurement_mode,
        request_count=c.measurement_request_count,
    )
    return assess(windows, Criterion(c.stability_windows, c.stability_percentage))


def stage_results(record: RunRecord) -> list[StageResult] | None:
    """Each stage of the run's traffic shape judged on its own (None without a shape)."""
    if record.stages is None or record.log is None or not record.started_at:
        return None
    return judge_stages(
        record.log, record.stages, record.shape_started_at, record.stopped_at, record.config
    )


def requests_outside_run(record: RunRecord) -> int:
    """Requests logged more than a second before the run started or after it stopped, on
    the master's clock (a worker's clock the offset measurement missed)."""
    if record.log is None or not record.started_at:
        return 0
    return record.log.requests_outside(record.started_at - 1.0, record.stopped_at + 1.0)


def request_rate_sent(figures: RunFigures) -> float:
    """Requests per second the generator sent over what targets are judged on."""
    basis = figures.basis
    return basis.requests / basis.duration_s if basis.duration_s else 0.0
