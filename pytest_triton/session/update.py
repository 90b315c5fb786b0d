"""A model updated while it serves: version 2 loaded next to version 1, then version 1 retired,
as a release rolls out on a server in explicit model control or in poll mode.

`switch_versions` does the two loads (Deployment.serve_versions) and says when each ended;
`switch_versions_by_polling` does the same by changing the repository on disk for a server
that polls it (version 2's directory moved in, then a config.pbtxt serving only version 2)
and waits for the server to follow each change;
`update_under_load` (pytest's side; Locust's is --triton-update-to) keeps requests in flight
from threads meanwhile and checks every answer against both versions' PyTorch references
(parity/answers.py): no request may fail, every answer must be version 1's or version 2's,
and only version 2's once version 1 is retired. The p99 latency of the requests answered
during the switch is reported beside the whole run's.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import ConfigError, ModelLoadError
from pytest_triton.client.triton_client import TritonClient
from pytest_triton.parity.answers import AnswerCheck, WrongSoFar
from pytest_triton.repository.spec import ModelSpec
from pytest_triton.repository.variants import Variant
from pytest_triton.session.deployment import Deployment, ServedModel


@dataclass(frozen=True)
class Switch:
    """When the update's steps ended (wall clock, time.time())."""

    old: int
    new: int
    started: float
    both_served: float  # the new version loaded beside the old one
    finished: float  # the old version retired: only the new one serves

    def as_dict(self) -> dict[str, Any]:
        return {
            "old_version": self.old,
            "new_version": self.new,
            "both_served_after_s": self.both_served - self.started,
            "finished_after_s": self.finished - self.started,
        }


def stage_update(deployment: Deployment, variant: Variant, spec: ModelSpec) -> Variant:
    """Export the new version beside the served one (before any load: exports are slow)."""
    return deployment.repository.add_version(variant, spec)


def switch_versions(
    deployment: Deployment,
    old: Variant,
    new: Variant,
    *,
    settle_s: float = 0.0,
    on_retired: Callable[[], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Switch:
    """Serve both versions, wait `settle_s`, then only the new one."""
    started = time.time()
    deployment.serve_versions(old, [old.spec.version, new.spec.version])
    both = time.time()
    if settle_s > 0:
        sleep(settle_s)
    deployment.serve_versions(old, [new.spec.version])
    finished = time.time()
    if on_retired is not None:
        on_retired()
    return Switch(old.spec.version, new.spec.version, started, both, finished)


def stage_poll_update(
    deployment: Deployment, variant: Variant, spec: ModelSpec
) -> tuple[Variant, Path]:
    """Poll mode, before any load: export the new version outside the repository (a polling
    server would take a half-written version, or a staging directory, for a model)."""
    _require_poll(deployment, variant)
    return deployment.repository.stage_version(variant, spec)


def switch_versions_by_polling(
    deployment: Deployment,
    old: Variant,
    new: Variant,
    staged: Path,
    *,
    settle_s: float = 0.0,
    on_retired: Callable[[], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    timeout_s: float = 60.0,
) -> Switch:
    """Make the model's config serve every version present (version_policy all) and move
    the staged version into the repository, wait until the server serves it beside the old
    one, wait `settle_s`, then write a config serving only the new version and wait
    until the old one is no longer ready (each step as soon as the server's poll sees it)."""
    _require_poll(deployment, old)
    client = deployment.client("http")
    name, old_version, new_version = old.model_name, str(old.spec.version), str(new.spec.version)
    started = time.time()
    # every version present, then version 2 moved in: a poll between the two sees only 1
    deployment.repository.write_versions_config(old, None)
    deployment.repository.install_version(new, staged)
    _wait_for(
        deployment,
        old,
        lambda: client.is_model_ready(name, new_version),
        f"serve version {new_version} (moved into the repository)",
        timeout_s,
    )
    both = time.time()
    if settle_s > 0:
        sleep(settle_s)
    deployment.repository.write_versions_config(old, [new.spec.version])
    _wait_for(
        deployment,
        old,
        lambda: not client.is_model_ready(name, old_version),
        f"retire version {old_version} (config.pbtxt serving only {new_version})",
        timeout_s,
    )
    finished = time.time()
    if on_retired is not None:
        on_retired()
    return Switch(old.spec.version, new.spec.version, started, both, finished)


def _require_poll(deployment: Deployment, variant: Variant) -> None:
    server = deployment.server
    if server.model_control_mode != "poll" or not deployment.serves_repository_directly:
        raise ConfigError(
            f"{variant.model_name!r}: an update by changing the repository needs a server in "
            "poll model control that reads this repository (a local or container server)"
        )


def _wait_for(
    deployment: Deployment,
    variant: Variant,
    done: Callable[[], bool],
    what: str,
    timeout_s: float,
    poll_s: float = 0.05,
) -> None:
    """Wait until the polling server has done `what`; a timeout is a ModelLoadError with
    the server's log (where a load the poll tried and failed is told)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            deployment.server.check_alive()
            raise ModelLoadError(
                variant.model_name,
                f"the server did not {what} within {timeout_s:.0f}s of polling",
                deployment.server.log_tail(),
            )
        time.sleep(poll_s)


@dataclass
class _Answered:
    sent: float  # wall clock
    latency_ms: float
    failure: str | None = None
    wrong: str | None = None
    version: str | None = None


@dataclass
class UpdateReport:
    """What requests saw while a model was updated under load."""

    switch: Switch | None
    answers: list[_Answered] = field(default_factory=list)
    error: str | None = None  # the update itself failed (a load the server refused)

    @property
    def failures(self) -> list[str]:
        return [a.failure for a in self.answers if a.failure]

    @property
    def wrong_answers(self) -> list[str]:
        return [a.wrong for a in self.answers if a.wrong]

    def by_version(self, after_switch: bool | None = None) -> dict[str, int]:
        """Answers per version whose values matched (after the switch, before it, or all)."""
        end = self.switch.finished if self.switch else float("inf")
        return dict(
            Counter(
                a.version
                for a in self.answers
                if a.version is not None
                and (after_switch is None or (a.sent >= end) == after_switch)
            )
        )

    def p99_ms(self, during_switch: bool = False) -> float:
        """p99 latency of every request, or of those in flight during the switch."""
        answers = self.answers
        if during_switch and self.switch is not None:
            s = self.switch
            answers = [
                a
                for a in answers
                if a.sent <= s.finished and a.sent + a.latency_ms / 1e3 >= s.started
            ]
        latencies = [a.latency_ms for a in answers]
        return float(np.percentile(latencies, 99)) if latencies else float("nan")

    @property
    def problems(self) -> list[str]:
        found = [f"the update failed: {self.error}"] if self.error else []
        if self.failures:
            found.append(f"{len(self.failures)} failed requests, the first: {self.failures[0]}")
        if self.wrong_answers:
            found.append(
                f"{len(self.wrong_answers)} wrong answers, the first: {self.wrong_answers[0]}"
            )
        if self.switch is not None:
            late = self.by_version(after_switch=True).get(str(self.switch.old), 0)
            if late:
                found.append(f"{late} answers of version {self.switch.old} after it was retired")
            if not self.by_version(after_switch=True).get(str(self.switch.new)):
                found.append(f"no answer of version {self.switch.new} after the switch")
        return found

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        s = self.switch
        head = f"update under load: {len(self.answers)} requests"
        if s is not None:
            head += (
                f"; version {s.new} served beside {s.old} after "
                f"{s.both_served - s.started:.2f}s, version {s.old} retired after "
                f"{s.finished - s.started:.2f}s; answers by version before the switch "
                f"{self.by_version(False)}, after it {self.by_version(True)}"
            )
        head += (
            f"; p99 {self.p99_ms():.1f} ms overall, "
            f"{self.p99_ms(during_switch=True):.1f} ms during the switch"
        )
        return "\n".join([head, *(f"  - {p}" for p in self.problems)])

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError(self.describe())


def update_under_load(
    served: ServedModel,
    spec: ModelSpec,
    client: TritonClient,
    *,
    users: int = 4,
    batch_size: int = 1,
    before_s: float = 1.0,
    settle_s: float = 0.5,
    after_s: float = 1.0,
    after_answers: int = 16,
    after_timeout_s: float = 30.0,
    distinct_inputs: int = 4,
    poll_timeout_s: float = 60.0,
) -> UpdateReport:
    """Keep `users` requests in flight (threads, one request each at a time) to `served`'s
    model, without a version, while version `spec.version` (same name and signature) is
    loaded beside it and the served version retired: by loads in explicit model control, by
    changing the repository on disk for a server in poll mode. Every answer is checked
    against both versions' PyTorch references. The report says what was seen; assert_ok()
    gates.

    After the retirement the load goes on for `after_s` and until `after_answers` requests
    sent after it have been answered (at most `after_timeout_s` more): on a busy machine a
    request can take longer than `after_s`, and a load that stopped on the clock alone had
    no answer after the switch to judge."""
    deployment = served.deployment
    old = served.variant
    staged: Path | None = None
    if deployment.server.model_control_mode == "poll":
        new, staged = stage_poll_update(deployment, old, spec)
    else:
        new = stage_update(deployment, old, spec)
    native_old = deployment.repository.native(old)
    native_new = deployment.repository.native(new)
    labels = (str(old.spec.version), str(new.spec.version))
    checks: list[AnswerCheck] = []
    wrong_so_far = WrongSoFar()  # the first wrong answers of the update name the difference
    pools = []
    for user in range(users):
        batches = [
            native_old.cast_inputs(old.spec.make_inputs(batch_size, user * distinct_inputs + i))
            for i in range(distinct_inputs)
        ]
        prepared = client.prepare_all(old.model_name, batches)
        references: list[Mapping[str, Mapping[str, Array]]] = [
            {labels[0]: native_old(b), labels[1]: native_new(b)} for b in batches
        ]
        checks.append(
            AnswerCheck(
                old.model_name,
                list(zip(prepared, references, strict=True)),
                every=1,
                fmt=old.format,
                context=f"model {old.model_name!r}, protocol {client.protocol!r}",
                wrong_so_far=wrong_so_far,
            )
        )
        pools.append(prepared)
    report = UpdateReport(None)
    stop = threading.Event()
    lock = threading.Lock()

    def user_loop(check: AnswerCheck, prepared: list[Any]) -> None:
        turn = 0
        while not stop.is_set():
            request = prepared[turn % len(prepared)]
            turn += 1
            sent, clock = time.time(), time.perf_counter()
            answered = _Answered(sent, 0.0)
            try:
                raw = client.send_answer(request)
            except Exception as exc:  # every failure is reported, not raised
                answered.failure = str(exc)
            answered.latency_ms = (time.perf_counter() - clock) * 1e3
            if answered.failure is None:
                verdict = check.check(request, raw)
                answered.wrong = str(verdict.wrong) if verdict.wrong else None
                answered.version = verdict.matched
            with lock:
                report.answers.append(answered)

    def answered_after(end: float) -> int:
        with lock:
            return sum(1 for a in report.answers if a.sent >= end)

    def retired() -> None:
        for check in checks:
            check.allowed = (labels[1],)

    threads = [
        threading.Thread(target=user_loop, args=(c, p), daemon=True)
        for c, p in zip(checks, pools, strict=True)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(before_s)
        try:
            if staged is not None:
                report.switch = switch_versions_by_polling(
                    deployment,
                    old,
                    new,
                    staged,
                    settle_s=settle_s,
                    on_retired=retired,
                    timeout_s=poll_timeout_s,
                )
            else:
                report.switch = switch_versions(
                    deployment, old, new, settle_s=settle_s, on_retired=retired
                )
        except Exception as exc:  # the update's failure is the report's first problem
            report.error = str(exc)
        time.sleep(after_s)
        if report.switch is not None:
            deadline = time.monotonic() + after_timeout_s
            end = report.switch.finished
            while answered_after(end) < after_answers and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=client.timeout_s + 5)
        for prepared in pools:
            for request in prepared:
                request.release()
        if staged is not None and staged.exists():  # the update stopped before moving it in
            shutil.rmtree(staged.parent, ignore_errors=True)
    return report
