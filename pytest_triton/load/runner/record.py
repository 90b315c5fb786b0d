"""Step 1 of a run's verdict (measure -> figures -> targets -> verdict -> report): read what
the run left from Locust's objects, once, into a plain `RunRecord`. The only step that
touches Locust; everything after it is plain code in load/measure/."""

from __future__ import annotations

import time

from locust.env import Environment
from locust.stats import StatsError

from pytest_triton.base.errors import WrongAnswer
from pytest_triton.load.measure.failed_requests import FailureTally
from pytest_triton.load.measure.run_figures import RunRecord
from pytest_triton.load.runner.agreement import agreement_counts, answers_checked
from pytest_triton.load.runner.distributed import worker_offsets
from pytest_triton.load.runner.recording import schedule_lag, window_log
from pytest_triton.load.runner.run import LoadRun, current_host
from pytest_triton.load.runner.shapes import shape_of
from pytest_triton.load.runner.stream_recording import stream_log

WRONG_ANSWER = WrongAnswer.__name__ + "("


def record_of(run: LoadRun) -> RunRecord:
    environment = run.environment
    total = environment.stats.total
    log = window_log(environment)
    stopped_at = run.stopped_at or time.time()
    shape = shape_of(environment)
    agreed, judged = agreement_counts(environment)
    return RunRecord(
        config=run.config,
        host=current_host(environment),
        requests=total.num_requests,
        failures=total.num_failures,
        wrong_answers=wrong_answers(environment),
        answers_checked=answers_checked(environment),
        failure_reasons=log.total().reasons if log is not None else FailureTally(),
        agreed=agreed,
        agreement_samples=judged,
        duration_s=client_duration(environment),
        log=log,
        started_at=run.started_at,
        stopped_at=stopped_at,
        stages=shape.stages if shape is not None else None,
        shape_started_at=shape.started_at if shape is not None else 0.0,
        soak_samples=list(run.scraper.samples) if run.scraper is not None else None,
        update=run.update.figures(log, stopped_at) if run.update is not None else None,
        offsets=worker_offsets(environment),
        reports=list(run.reports),
        cpu_percent=run.cpu_percent,
        cpu_warning=run.cpu_warning,
        lag=schedule_lag(environment),
        stream_log=stream_log(environment),
    )


def client_duration(environment: Environment) -> float:
    """First request to last, from Locust's (aggregated) statistics."""
    total = environment.stats.total
    if total.last_request_timestamp and total.start_time:
        return max(total.last_request_timestamp - total.start_time, 1e-9)
    return 0.0


def wrong_answers(environment: Environment) -> int:
    """Failed requests whose answer was wrong (users.py reports them as WrongAnswer): from
    Locust's error table, which holds every worker's too."""
    return sum(
        e.occurrences
        for e in environment.stats.errors.values()
        if StatsError.parse_error(e.error).startswith(WRONG_ANSWER)
    )
