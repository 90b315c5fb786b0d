"""The run as it happens, for the web UI's Triton tab and PREFIX_triton.csv.

Every couple of seconds the master (or the single local process) gathers Locust's aggregated
client statistics, the sample counts and the server's statistics delta since the start into one
Snapshot; the web tab serves the latest (a page view never waits on the server), the CSV is
rewritten like Locust's own. At the end of the run the final snapshot takes the settled server
report and the run's generator figures, so it reads like the printed verdict.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import logging
import math
import time
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner
from locust.stats import StatsEntry

from pytest_triton.client.stats import ModelStats
from pytest_triton.load.measure import targets as tg
from pytest_triton.load.measure.server_side import generator_warnings
from pytest_triton.load.measure.stream_log import figures_of
from pytest_triton.load.measure.window_log import WindowLog
from pytest_triton.load.runner.generator_cpu import cpu_of
from pytest_triton.load.runner.recording import window_log
from pytest_triton.load.runner.run import LoadRun, run_of
from pytest_triton.load.runner.run_state import StateKey, run_state
from pytest_triton.load.runner.stream_recording import stream_log
from pytest_triton.load.runner.verdict import measured
from pytest_triton.load.webui.snapshot import (
    ModelFigures,
    Snapshot,
    StreamsNow,
    chart_point,
    csv_rows,
)

log = logging.getLogger("pytest_triton.load")
PERIOD_S = 2.0
HISTORY_POINTS = 1800  # an hour of points at the default period
WINDOW_S = 10.0  # the chart's p99 covers about this much, as Locust's current percentiles do


def live_of(environment: Environment) -> LiveView | None:
    return run_state(environment).get(LIVE)


def _known(value: float) -> float | None:
    """A figure the tab shows: None where nothing was measured (NaN)."""
    return None if math.isnan(value) else value


def _counts(entries: list[StatsEntry]) -> tuple[int, int]:
    """One model's requests and failures over its protocols, as Locust counts them."""
    return sum(e.num_requests for e in entries), sum(e.num_failures for e in entries)


class LiveView:
    """A greenlet that keeps the latest Snapshot of one run and the charts' history."""

    def __init__(
        self, run: LoadRun, csv_prefix: str | None = None, period_s: float = PERIOD_S
    ) -> None:
        self.run = run
        self.environment = run.environment
        self.period_s = period_s
        self.csv_path = Path(f"{csv_prefix}_triton.csv") if csv_prefix else None
        self.snapshot: Snapshot | None = None
        self.history: collections.deque[dict[str, Any]] = collections.deque(maxlen=HISTORY_POINTS)
        self._started = time.monotonic()
        self._greenlet: gevent.Greenlet | None = None
        self.final = False
        run_state(self.environment)[LIVE] = self

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._loop)

    def _loop(self) -> None:
        while True:
            gevent.sleep(self.period_s)
            self._safe_update(self.final)

    def _safe_update(self, final: bool) -> None:
        try:
            self.update(final)
        except Exception:  # a live view must never end the run, nor change its verdict
            log.exception("pytest-triton: the live view failed to update")

    def reset(self) -> None:
        """Locust's statistics were reset: so are the windows and the chart."""
        self.history.clear()
        self._started = time.monotonic()

    def finish(self) -> None:
        """The run stopped: from now on the snapshot takes the settled server report and the
        run's generator figures. It keeps refreshing: a master still receives its workers'
        last statistics after the stop."""
        self.final = True
        self._safe_update(final=True)

    def stop(self) -> None:
        if self._greenlet is not None and self._greenlet is not gevent.getcurrent():
            self._greenlet.kill(block=True)
        self._greenlet = None

    def close(self) -> None:
        """Locust quits (the run was judged): the last snapshot and CSV, every report in."""
        self.stop()
        self.final = True
        self._safe_update(final=True)

    def update(self, final: bool = False) -> Snapshot:
        snapshot = self._gather(final)
        self.snapshot = snapshot
        if not final:
            self.history.append(chart_point(snapshot))
        if self.csv_path is not None:
            write_live_csv(self.csv_path, snapshot)
        return snapshot

    # -- gathering -------------------------------------------------------------------------
    def _server(self, final: bool) -> dict[str, ModelStats | None]:
        run = self.run
        if final and run.finished:
            return {r.model: r.delta for r in run.reports}
        return run.tracker.current() if run.tracker is not None else {}

    def _gather(self, final: bool) -> Snapshot:
        environment, run = self.environment, self.run
        stats = environment.stats
        requests = window_log(environment) or WindowLog()
        by_name: dict[str, list[StatsEntry]] = {}
        for (name, _method), entry in stats.entries.items():
            by_name.setdefault(name, []).append(entry)
        server = self._server(final)
        tracked = run.tracker.models if run.tracker is not None else []
        names = list(dict.fromkeys([*tracked, *by_name]))
        models = [
            self._figures(name, by_name.get(name, []), requests, server.get(name)) for name in names
        ]
        streams = self._streams(by_name)
        figures = with_streams(measured(run), streams)
        checks = tg.evaluate(tg.Targets.from_config(run.config), figures)
        cpu = run.cpu_percent if final else _generator_cpu(environment)
        cpu_warning = run.cpu_warning or bool(run.monitor and run.monitor.cpu_warning)
        reports = [r for r in (m.report() for m in models) if r is not None]
        warnings = generator_warnings(cpu_percent=cpu, cpu_warning=cpu_warning, reports=reports)
        runner = environment.runner
        return Snapshot(
            state=str(runner.state) if runner else "missing",
            elapsed_s=time.monotonic() - self._started,
            duration_s=figures.duration_s,
            models=models,
            checks=checks,
            warnings=warnings,
            cpu_percent=cpu,
            final=final,
            streams=streams,
        )

    def _streams(self, by_name: dict[str, list[StatsEntry]]) -> StreamsNow | None:
        """The streams so far, from this process's stream log (a master's holds its
        workers'); None where the run drives no decoupled model."""
        log = stream_log(self.environment)
        first = log.first_at if log is not None else None
        if log is None or first is None:
            return None
        now = time.time()
        total = log.total()
        span = min(now, log.last_at or now) - first
        so_far = figures_of(total, max(span, 1e-9), (50.0, 99.0))
        recent = log.figures(now - WINDOW_S, now)
        ended = total.streams + total.failed
        config = self.run.config.gate
        names = [n for n, es in by_name.items() if any(e.method.endswith("-stream") for e in es)]
        return StreamsNow(
            model=", ".join(names) or "streams",
            streams=total.streams,
            failed=total.failed,
            tokens=total.tokens,
            checked=total.checked,
            mismatched=total.mismatched,
            ttft_p50_ms=_known(so_far.ttft_ms[50.0]),
            ttft_p99_ms=_known(so_far.ttft_ms[99.0]),
            itl_p50_ms=_known(so_far.itl_ms[50.0]),
            itl_p99_ms=_known(so_far.itl_ms[99.0]),
            tokens_per_s=recent.output_tokens_per_s if recent is not None else 0.0,
            run_tokens_per_s=_known(so_far.output_tokens_per_s),
            goodput=(
                total.good / ended
                if ended and (config.perf_slo_ttft_ms or config.perf_slo_itl_ms)
                else None
            ),
            ttft_p99_now_ms=_known(recent.ttft_ms[99.0]) if recent is not None else None,
            itl_p99_now_ms=_known(recent.itl_ms[99.0]) if recent is not None else None,
        )

    def _figures(
        self, name: str, entries: list[StatsEntry], requests: WindowLog, server: ModelStats | None
    ) -> ModelFigures:
        """Counts as Locust's statistics have them; latencies from the request log's
        histograms (us resolution), over the run and over about the last WINDOW_S."""
        total = self.environment.stats.total
        count, failures = _counts(entries)
        run = requests.total(name)
        pct = run.histogram.percentiles_ms((50, 95, 99))
        recent = requests.recent(name, time.time() - WINDOW_S).histogram
        known = _known

        return ModelFigures(
            model=name,
            requests=count,
            failures=failures,
            samples=run.samples,
            request_rate=sum(e.current_rps for e in entries),
            sample_rate=requests.current_rate(name, total.start_time, total.last_request_timestamp),
            avg_ms=known(run.avg_ms),
            p50_ms=known(pct[50]),
            p95_ms=known(pct[95]),
            p99_ms=known(pct[99]),
            p99_now_ms=known(recent.percentile_ms(99)),
            server=server,
        )


def with_streams(figures: tg.Measured, streams: StreamsNow | None) -> tg.Measured:
    """The client's figures with the streams' so far, so that the streaming targets' rows
    show where the run stands (the verdict judges them after the warm-up)."""
    if streams is None:
        return figures

    def value(v: float | None) -> float:
        return math.nan if v is None else v

    return dataclasses.replace(
        figures,
        ttft_p99_ms=value(streams.ttft_p99_ms),
        itl_p99_ms=value(streams.itl_p99_ms),
        output_tokens_per_s=value(streams.run_tokens_per_s),
        stream_goodput=value(streams.goodput),
    )


def write_live_csv(path: Path, snapshot: Snapshot) -> None:
    text = io.StringIO()
    csv.writer(text).writerows(csv_rows(snapshot))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.getvalue())


def _generator_cpu(environment: Environment) -> float | None:
    """The load generator's CPU now: this process's since the last tick, or on a master its
    busiest worker's latest report."""
    cpu = cpu_of(environment)
    if cpu is None:
        return None
    return cpu.busiest_worker() if isinstance(environment.runner, MasterRunner) else cpu.own()


def start(environment: Environment) -> LiveView | None:
    """A new live view for the run that just started (master or local process only)."""
    run = run_of(environment)
    if run is None or not run.started:
        return None
    previous = live_of(environment)
    if previous is not None:
        previous.stop()  # its last snapshot and CSV were written when its run stopped
    options = environment.parsed_options
    csv_prefix = getattr(options, "csv_prefix", None)
    view = LiveView(run, csv_prefix)
    if csv_prefix or not getattr(options, "headless", False):
        # Refreshed every PERIOD_S only for a reader (the web UI, PREFIX_triton.csv): each
        # refresh reads the run's histograms, CPU a headless run would take from its load.
        view.start()
    return view


LIVE = StateKey[LiveView]("live view")
