"""`triton-tune`: find the serving configuration of one model that serves it best and still
answers like PyTorch.

    triton-tune -m dlrm -b 256 --perf-latency-p99 20 --time-budget 10m -o tune-dlrm
    triton-tune -m dlrm --committed model_repository/dlrm/config.pbtxt --gate-within 10

From Python: `tune(TuneOptions(model="dlrm", request_batch=256))` returns the `Outcome`.
Every candidate is deployed with the repository builder on the server of the chosen launcher
(the embedded local one by default, a container, a GPU server, or --triton-url of a server in
explicit model-control mode), checked for parity, then measured with triton-perf's load
generator in measurement windows.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.formats import CPU_FORMATS, GPU_FORMATS
from pytest_triton.base.urls import parse_url
from pytest_triton.client.wire.request import Protocol
from pytest_triton.load.perf.command import UNITS
from pytest_triton.load.preflight import preflight_load
from pytest_triton.load.runner.embedded import DEFAULT_FORMAT, Size, check_format, model_source
from pytest_triton.load.tune import space as sp
from pytest_triton.load.tune.accuracy_rule import AccuracyRule, rule_for
from pytest_triton.load.tune.progress import Progress
from pytest_triton.load.tune.space import Candidate, SearchSpace
from pytest_triton.load.tune.strategy import (
    OBJECTIVES,
    Budget,
    Constraints,
    Objective,
    Search,
    Trial,
    best_trial,
    committed_trial,
    remeasured,
)
from pytest_triton.load.tune.tables import Outcome, describe, gate_check, write_all
from pytest_triton.load.tune.trials import CandidateRunner, gpu_formats, memory_unknown
from pytest_triton.repository import pbtxt
from pytest_triton.repository.spec import ModelSpec

TUNE_MEASUREMENT = {"measurement_interval": 2000.0, "load_warmup": 500.0, "max_trials": 5}
"""Shorter windows than triton-perf's by default (each still needs 3 that agree): a quick
search measures a few dozen candidates. Flags and TRITON_* variables override them."""
PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}


@dataclass
class SpaceChoice:
    """Values per dimension given by the user; None: the default around the committed one."""

    formats: tuple[str, ...] | None = None
    max_batch_sizes: tuple[int, ...] | None = None
    dynamic_batching: tuple[bool, ...] | None = None
    queue_delays_us: tuple[int, ...] | None = None
    preferred_batch_sizes: tuple[tuple[int, ...], ...] | None = None
    instance_counts: tuple[int, ...] | None = None
    instance_kinds: tuple[str | None, ...] | None = None
    threads: tuple[int, ...] | None = None
    concurrencies: tuple[int, ...] | None = None
    precisions: tuple[str, ...] | None = None  # other than fp32: judged by `accuracy`


@dataclass
class TuneOptions:
    """One search: the model (zoo name or MODULE:CALLABLE), what may change, what counts."""

    model: str
    size: Size = "small"
    request_batch: int = 1
    choice: SpaceChoice = field(default_factory=SpaceChoice)
    objective: Objective = "throughput"
    constraints: Constraints = field(default_factory=Constraints)
    accuracy: AccuracyRule | None = None  # every candidate's accuracy ratio; under it: out
    slo_ms: float | None = None
    mode: Literal["quick", "exhaustive"] = "quick"
    time_budget_s: float | None = None
    committed: Path | None = None  # a committed config.pbtxt; None: the spec's own settings
    committed_concurrency: int | None = None  # None: the smallest concurrency searched
    gate_within: float | None = None  # percent
    confirm: int = 1  # re-measurements of the committed and the best configuration at the end
    config: TritonConfig | None = None
    output_dir: Path | None = None
    json_path: Path | None = None
    unit: str | None = None
    progress: Callable[[str], None] = field(
        default=lambda line: print(f"[triton-tune] {line}", file=sys.stderr, flush=True)
    )
    bar: bool | None = None  # a progress bar with ETA; None: when stderr is a terminal


def default_space(
    committed: Candidate, request_batch: int, choice: SpaceChoice, batched: bool
) -> SearchSpace:
    """The user's values where given; else a few around the committed configuration."""
    b = request_batch
    cores = os.cpu_count() or 1
    mbs = tuple(sorted({committed.max_batch_size, *(b * 4**k for k in range(3))}))
    if not batched:
        mbs = (0,)
    space = SearchSpace(
        format=choice.formats or (committed.format,),
        max_batch_size=choice.max_batch_sizes or mbs,
        dynamic_batching=choice.dynamic_batching or ((False, True) if batched else (False,)),
        max_queue_delay_us=choice.queue_delays_us or (0, 500, 2000),
        preferred_batch_sizes=choice.preferred_batch_sizes or ((),),
        instance_count=choice.instance_counts or tuple(sorted({1, min(2, cores)})),
        instance_kind=choice.instance_kinds or (None,),
        threads=choice.threads or (0, 1),
        concurrency=choice.concurrencies or (1, 2, 4, 8),
        precision=choice.precisions or (committed.precision,),
    )
    return space


def _committed(options: TuneOptions, spec: ModelSpec, fmt: str, concurrency: int) -> Candidate:
    if options.committed is None:
        return sp.from_spec(spec, fmt, concurrency)
    config = pbtxt.read_config(options.committed)
    return sp.from_config(config, fmt, concurrency)


def tune_config(config: TritonConfig | None) -> TritonConfig:
    """The tuner's measurement defaults under whatever was set explicitly."""
    config = config or resolve()
    unset = {k: v for k, v in TUNE_MEASUREMENT.items() if config.origins.get(k) == "default"}
    return config.with_overrides(unset) if unset else config


def tune(options: TuneOptions) -> Outcome:
    """Search, then write the files (with `output_dir`) and the gate check (`gate_within`)."""
    config = tune_config(options.config)
    if options.objective not in OBJECTIVES:
        raise ConfigError(f"objective {options.objective!r}: use {', '.join(OBJECTIVES)}")
    if options.objective == "goodput" and options.slo_ms is None:
        raise ConfigError("the goodput objective needs an SLO: --slo MS")
    if options.request_batch < 1:
        raise ConfigError("the request batch size must be >= 1")
    precisions = sp.searched_precisions(options.choice.precisions or ("fp32",))
    if options.accuracy is None:  # refused: a reduced precision without a rule
        rule_for(precisions, None, None)
    if options.constraints.max_memory_mb is not None and config.server.url:
        raise ConfigError(memory_unknown("external"))
    if config.server.url:  # one request before any export: a refusal is said at once
        scheme = parse_url(config.server.url)[0]
        asked = (config.client.protocol or ())[:1] or (
            "grpc" if scheme in ("grpc", "grpcs") else "http",
        )
        protocol: Protocol = "grpc" if asked[0] == "grpc" else "http"
        preflight_load(config.server.url, "--triton-url", [protocol], config)
    asked = options.choice.formats or ((config.serving.format,) if config.serving.format else ())
    formats = asked or (DEFAULT_FORMAT,)
    if config.server.gpu:  # what the GPU server serves there (TensorRT and ORT-TensorRT join)
        servable = CPU_FORMATS + GPU_FORMATS
        for fmt in set(formats) - set(servable):
            raise ConfigError(f"export format {fmt!r}: choose from {', '.join(servable)}")
        formats = gpu_formats(config, asked)
    elif not config.server.url:  # the server we start serves the CPU formats
        for fmt in formats:
            check_format(fmt)
    spec = model_source(options.model, options.size, formats[0]).spec
    concurrencies = options.choice.concurrencies or (1, 2, 4, 8)
    start = _committed(
        options, spec, formats[0], options.committed_concurrency or min(concurrencies)
    )
    choice = dataclasses.replace(options.choice, formats=formats)
    space = default_space(start, options.request_batch, choice, spec.batched)
    unit = options.unit or UNITS.get(options.model, "infer/s")
    search = Search(
        space,
        start,
        options.request_batch,
        options.objective,
        options.constraints,
        Budget(options.time_budget_s),
        options.mode,
    )
    runner = CandidateRunner(
        spec,
        options.model,
        options.size,
        search.space.format,
        config,
        request_batch=options.request_batch,
        constraints=options.constraints,
        slo_ms=options.slo_ms,
        progress=lambda m: shown.message(m),
        precisions=precisions,
        accuracy=options.accuracy,
    )
    size = search.space.size()  # the quick search's first pass tries at most 2 per dimension
    expected = size if options.mode == "exhaustive" else min(size, 2 * len(sp.DIMENSIONS) + 1)
    shown = Progress(options.progress, options.bar, total=expected)
    say = shown.message
    say(
        f"{options.mode} search over {search.space.size()} combinations of "
        + ", ".join(f"{d} {list(search.space.values(d))}" for d in sp.DIMENSIONS)
    )
    say(f"committed configuration: {start.label()}")
    if options.accuracy is not None:
        say(f"accuracy constraint: {options.accuracy.describe()}")
    trials: list[Trial] = []
    began = time.monotonic()
    try:
        runner.start()
        committed_serving = start.serving

        def measure(candidate: Candidate) -> Trial:
            return runner.measure(
                len(search.trials) + 1, candidate, candidate.serving == committed_serving
            )

        for trial in search.run(measure):
            trials.append(trial)
            shown.candidate(trial, search, unit)
        shown.close()
        _confirm(trials, runner, options, say, unit)
        outcome = Outcome(
            model=options.model,
            unit=unit,
            objective=options.objective,
            constraints=options.constraints,
            mode=options.mode,
            request_batch=options.request_batch,
            trials=trials,
            seconds=time.monotonic() - began,
            stopped=search.stopped,
            slo_ms=options.slo_ms,
            accuracy=options.accuracy,
        )
        _best_config(outcome, options, runner, spec, start)
    finally:
        shown.close()
        runner.close()
    if options.gate_within is not None:
        outcome.gate = gate_check(outcome, options.gate_within)
    if options.output_dir is not None:
        write_all(outcome, options.output_dir, options.json_path)
    return outcome


def _confirm(
    trials: list[Trial],
    runner: CandidateRunner,
    options: TuneOptions,
    say: Callable[[str], None],
    unit: str,
) -> None:
    """Measure the committed and the best configuration again, alternately, `confirm` times:
    on a busy machine one window series can be off by tens of percent, and the gate compares
    exactly these two. Their figures become medians over every measurement."""
    committed = committed_trial(trials, options.objective, options.constraints)
    if options.confirm < 1 or committed is None:
        return
    confirmed: list[Trial] = []
    for _ in range(3):  # a best that lost its place to another is replaced by that one
        best = best_trial(trials, options.objective, options.constraints)
        if best is None or best is committed or any(best is t for t in confirmed):
            break
        for _round in range(options.confirm):
            for trial in (committed, best):
                if trial is committed and any(committed is t for t in confirmed):
                    continue
                again = runner.measure(trial.index, trial.candidate, trial.committed)
                remeasured(trial, again, options.constraints)
        confirmed += [committed, best]
    for trial in {t.index: t for t in confirmed}.values():
        say(f"confirmed: {describe(trial, unit)}")


def _backend_of(config: mc.ModelConfig) -> str:
    return config.backend or PLATFORM_BACKENDS.get(config.platform, "")


def _best_config(
    outcome: Outcome,
    options: TuneOptions,
    runner: CandidateRunner,
    spec: ModelSpec,
    start: Candidate,
) -> None:
    """The best configuration as a config.pbtxt: the committed file with the best serving
    fields (with --committed), else the best candidate's own config on this server; both
    named as the model is, diffed against what is committed."""
    best = outcome.best
    if best is None:
        return
    if options.committed is not None:
        committed = pbtxt.read_config(options.committed)
        backend = _backend_of(committed)
        key = sp.THREAD_PARAMETERS.get(backend)
        chosen = sp.apply(committed, best.candidate, key)
        outcome.committed_source = outcome.committed_file = str(options.committed)
        if best.candidate.threads and key is None:
            outcome.notes.append(
                f"note: the {backend or 'committed'} backend takes no intra-op thread count; "
                f"the best candidate used {best.candidate.threads}"
            )
        if best.candidate.precision != start.precision:
            outcome.notes.append(
                f"note: the best candidate serves {best.candidate.precision} (accuracy ratio "
                f"{best.accuracy_ratio:.4f}), the committed config {start.precision}: export "
                "that precision for it (e.g. triton-deploy --int8)"
            )
        if best.candidate.format != start.format:
            outcome.notes.append(
                f"note: the best candidate serves {best.candidate.format}, the committed "
                f"config {start.format}: export that format for it (e.g. triton-deploy)"
            )
    else:
        committed_config = runner.config_of(start.serving)
        best_config = runner.config_of(best.candidate.serving)
        if committed_config is None or best_config is None:
            return
        committed, chosen = mc.ModelConfig(), mc.ModelConfig()
        committed.CopyFrom(committed_config)
        chosen.CopyFrom(best_config)
        name = runner.bases[(start.format, start.precision)].model_name
        committed.name = chosen.name = name
        outcome.committed_source = f"the model spec's own settings ({name} on this server)"
    outcome.committed_config = pbtxt.to_text(committed)
    outcome.best_config = pbtxt.to_text(chosen)
    if outcome.best_config == outcome.committed_config:
        outcome.notes.append("the committed configuration is the best found: config.diff is empty")
    outcome.notes.append(
        f"best concurrency: {best.candidate.concurrency} requests of batch "
        f"{outcome.request_batch} in flight"
    )
