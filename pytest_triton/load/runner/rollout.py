"""A model update under load from Locust (--triton-update-to): while the users run, the
master's embedded server loads the next version beside the served one, then retires the old
one (session/update.py's switch_versions, as a release rolls out in explicit model control).

The next version is exported before the run (exports are slow). Users check every answer
against both versions' PyTorch references (checking.py); an answer to a request sent after
the old version was retired must be the new version's. Workers learn when that was from the
master, on the master's clock (distributed.py keeps theirs in step). The verdict fails on a
failed update, a failed request, a wrong answer, or no request after the switch, and reports
the p99 latency of the requests answered during the switch.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.load.measure.window_log import Slice, WindowLog
from pytest_triton.load.runner.checking import next_version_spec
from pytest_triton.load.runner.embedded import EmbeddedServer
from pytest_triton.load.runner.recording import window_log
from pytest_triton.load.runner.run_state import StateKey, run_state

if TYPE_CHECKING:  # the repository and session layers import torch: only an update needs them
    from pytest_triton.repository.variants import Variant
    from pytest_triton.session.deployment import Deployment
    from pytest_triton.session.update import Switch

log = logging.getLogger("pytest_triton.load")
RETIRED = "pytest_triton_update_retired"
RETIRED_AT = StateKey[float]("update retired at")


@dataclass
class PlannedUpdate:
    """The update a run makes: from `old` to `new` (staged), `at_s` after the test starts."""

    deployment: Deployment
    old: Variant
    new: Variant
    at_s: float
    then_s: float | None = None  # end the run this long after the update finished
    switch: Switch | None = None
    error: str | None = None
    _greenlet: gevent.Greenlet | None = None

    def start(self, environment: Environment) -> None:
        self.switch, self.error = None, None
        run_state(environment).pop(RETIRED_AT)
        self._greenlet = gevent.spawn(self._run, environment)

    def _run(self, environment: Environment) -> None:
        gevent.sleep(self.at_s)
        log.info(
            "pytest-triton: updating %s from version %s to %s under load",
            self.old.model_name,
            self.old.spec.version,
            self.new.spec.version,
        )
        try:
            from pytest_triton.session.update import switch_versions

            self.switch = switch_versions(self.deployment, self.old, self.new)
        except Exception as exc:  # the update failed: that is the verdict, not a crash
            self.error = f"the update to version {self.new.spec.version} failed: {exc}"
            log.error("pytest-triton: %s", self.error)
            self._end_run_later(environment)
            return
        announce_retired(environment, self.switch.finished)
        log.info(
            "pytest-triton: version %s retired %.1fs after the update began; only version "
            "%s serves",
            self.old.spec.version,
            self.switch.finished - self.switch.started,
            self.new.spec.version,
        )
        self._end_run_later(environment)

    def _end_run_later(self, environment: Environment) -> None:
        """--triton-update-then: the run ends when the update is over and answered, not at a
        -t that a slow load (seconds of torch import on a busy machine) may outlast."""
        runner = environment.runner
        if self.then_s is None or runner is None:
            return

        def end() -> None:
            log.info("pytest-triton: ending the run %.1fs after the update", self.then_s)
            runner.quit()

        # its own greenlet: quitting stops this update's greenlet, which must not be the one
        # that quits
        gevent.spawn_later(self.then_s, end)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def figures(self, log_: WindowLog | None, stopped_at: float) -> dict[str, Any]:
        """The update's report: when each step ended, the requests during and after it, and
        the p99 latency of those answered during it."""
        figures: dict[str, Any] = {
            "model": self.old.model_name,
            "old_version": self.old.spec.version,
            "new_version": self.new.spec.version,
            "error": self.error,
        }
        if self.switch is None or log_ is None:
            return {**figures, "done": False}
        during = completed_between(log_, self.switch.started, self.switch.finished)
        after = completed_between(log_, self.switch.finished, stopped_at)
        return {
            **figures,
            "done": True,
            **self.switch.as_dict(),
            "requests_during_switch": during.requests,
            "failures_during_switch": during.failures,
            "p99_during_switch_ms": during.histogram.percentile_ms(99)
            if during.requests
            else math.nan,
            "requests_after_switch": after.requests,
        }


def plan_update(config: TritonConfig, server: EmbeddedServer | None) -> PlannedUpdate | None:
    """Stage --triton-update-to's version beside the embedded server's model (None without
    the option); ConfigError where the run cannot make the update."""
    target = config.load.update_to
    if not target:
        return None
    if server is None or server.deployment is None or server.repository is None:
        raise ConfigError(
            "--triton-update-to updates the model of the server a locustfile starts itself "
            "(no --host): pytest-triton cannot load versions into a server it did not start"
        )
    names = server.model_names()
    if len(names) != 1:
        raise ConfigError(
            f"--triton-update-to updates one model, and this run serves {len(names)} "
            f"({', '.join(names)})"
        )
    old = server.repository.variant(names[0])
    from pytest_triton.session.update import stage_update

    new = stage_update(server.deployment, old, next_version_spec(config))
    return PlannedUpdate(
        server.deployment, old, new, config.load.update_at, config.load.update_then
    )


def announce_retired(environment: Environment, at: float) -> None:
    """The old version retired at `at` (master's clock): this process's users and, from a
    master, every worker's check later answers against the new version only."""
    run_state(environment)[RETIRED_AT] = at
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        runner.send_message(RETIRED, {"at": at})


def listen_for_retirement(environment: Environment) -> None:
    """On a worker: take the master's word of when the old version retired."""
    runner = environment.runner
    if isinstance(runner, WorkerRunner):

        def on_retired(environment: Environment, msg: Any, **_: Any) -> None:
            run_state(environment)[RETIRED_AT] = float(msg.data["at"])

        runner.register_message(RETIRED, on_retired)
        environment.events.test_start.add_listener(
            lambda **_: run_state(environment).pop(RETIRED_AT)
        )


def sent_after_retirement(environment: Environment, latency_s: float) -> bool:
    """Whether a request just answered after `latency_s` was sent after the old version
    retired (on the master's clock, which the window log keeps)."""
    retired = run_state(environment).get(RETIRED_AT)
    if retired is None:
        return False
    requests = window_log(environment)
    now = requests.clock() if requests is not None else None
    return now is not None and now - latency_s > retired


def completed_between(log_: WindowLog, first: float, last: float) -> Slice:
    """Requests completed in the slices that overlap [first, last] (wall clock)."""
    total = Slice()
    begin = math.floor(first / log_.slice_s)
    end = math.ceil(last / log_.slice_s)
    for key, by_name in log_.slices.items():
        if begin <= key < end:
            for entry in by_name.values():
                total.add(entry)
    return total
