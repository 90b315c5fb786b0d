"""Each Locust process logs its streams (stream_log.py) from the request events of stream
users (`context["stream"]` holds a stream's timings, `context["stream_failed"]` when a failed
stream ended, `context["stream_checked"]` / `["stream_mismatched"]` whether its tokens were
compared with the reference and differed); workers send theirs to the master with
every statistics report, as recording.py does with requests. The log starts over when
Locust's statistics do. Only a process that runs stream users listens to every request
(listen_for_streams, from StreamUser.on_start): a listener costs every request of every other
user a call."""

from __future__ import annotations

from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from pytest_triton.load.measure.stream_log import StreamLog
from pytest_triton.load.runner.run_state import StateKey, run_state

STREAM_LOG = StateKey[StreamLog]("stream log")
REPORT_KEY = "pytest_triton_streams"
LISTENING = StateKey[bool]("stream listener added")


def stream_log(environment: Environment) -> StreamLog | None:
    return run_state(environment).get(STREAM_LOG)


def attach_stream_log(environment: Environment) -> StreamLog:
    """Start logging this process's streams (once per environment)."""
    log = stream_log(environment)
    if log is not None:
        return log
    log = StreamLog()
    run_state(environment)[STREAM_LOG] = log
    events = environment.events

    def on_report_to_master(data: dict[str, Any], **_: Any) -> None:
        data[REPORT_KEY] = log.take_unsent()

    def on_worker_report(data: dict[str, Any], **_: Any) -> None:
        if data.get(REPORT_KEY):
            log.add_sent(data[REPORT_KEY])

    events.test_start.add_listener(lambda **_: log.clear())
    events.reset_stats.add_listener(lambda **_: log.clear())
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        events.report_to_master.add_listener(on_report_to_master)
    elif isinstance(runner, MasterRunner):
        events.worker_report.add_listener(on_worker_report)
    return log


def listen_for_streams(environment: Environment) -> StreamLog | None:
    """Log the streams of this process's request events into its stream log, where it has
    one (attach_stream_log, at Locust's init; not in library use): once per environment, a
    stream user calls it as it starts."""
    log = stream_log(environment)
    if log is None or run_state(environment).get(LISTENING):
        return log
    run_state(environment)[LISTENING] = True

    def on_request(context: dict[str, Any] | None = None, **_: Any) -> None:
        context = context or {}
        timing = context.get("stream")
        checked = bool(context.get("stream_checked"))
        if timing is not None:
            ended_at, ttft_s, itl_s, e2e_s, tokens, good = timing
            log.record(ended_at, ttft_s, itl_s, e2e_s, tokens, good, checked)
        elif context.get("stream_failed") is not None:
            mismatched = bool(context.get("stream_mismatched"))
            log.record_failed(context["stream_failed"], checked, mismatched)

    environment.events.request.add_listener(on_request)
    return log
