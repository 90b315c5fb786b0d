"""Trying one candidate: deploy it with the repository builder (each format and precision's
artifact is exported once; each configuration gets a model directory of its own), check that
it still answers like PyTorch, then measure it with triton-perf's load generator.

A configuration that changes answers (a model whose output depends on the batch, under
dynamic batching) is disqualified with the mismatch message and never measured. An fp32
candidate is checked element-wise; a reduced-precision one (int8, fp16) by its accuracy on
the rule's dataset against fp32 PyTorch, and disqualified under the rule's ratio. With a rule,
every candidate's accuracy ratio is measured and shown beside its throughput.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.accuracy.outcome import AccuracyResult
from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError, TritonTestError
from pytest_triton.base.setting_sources import as_values
from pytest_triton.base.urls import check_host
from pytest_triton.client.triton_client import Protocol
from pytest_triton.load.perf.command import GeneratorProcess
from pytest_triton.load.perf.points import Point
from pytest_triton.load.tune.accuracy_rule import AccuracyRule, Dataset
from pytest_triton.load.tune.space import Candidate, thread_parameter
from pytest_triton.load.tune.strategy import Constraints, Trial, check_constraints, windows_spread
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.spec import ModelSpec
from pytest_triton.repository.variants import Variant, check_servable, default_format
from pytest_triton.server.docker_engine import docker_client, ensure_image, ensure_reaper
from pytest_triton.session.deployment import Deployment, ServedModel
from pytest_triton.session.lifecycle import launcher_for, start_deployment

BATCHED_PARITY_REQUESTS = 8
"""Single-row requests sent together to check that batching them changes no answer."""
BATCHED_PARITY_TRIES = 5
"""Bursts sent at most until two requests share an execution: at a queue delay of 0 us on a
busy machine, a burst's requests were each executed alone, the check saw no batching, and a
model whose answers change under batching passed it (its rows centred on their batch)."""


@dataclasses.dataclass
class Deployed:
    serving: Candidate
    variant: Variant
    config: mc.ModelConfig


def failed_under_load(point: Point, config: TritonConfig) -> str:
    """Why a measured candidate is disqualified by its requests ('' when it is not): a
    wrong answer beyond --triton-max-wrong-answers, or failed requests beyond
    --perf-fail-ratio; the reasons named with their counts, the first wrong answer in full."""
    wrong_allowed = config.gate.wrong_answers or 0
    ratio_allowed = config.gate.perf_fail_ratio or 0.0
    if point.wrong_answers <= wrong_allowed and point.fail_ratio <= ratio_allowed:
        return ""
    total = point.total_requests or point.requests
    reasons = point.reasons.summary() or "reasons not recorded"
    text = (
        f"{point.failed_requests:,} of {total:,} requests failed under load "
        f"(--perf-fail-ratio {ratio_allowed:g}): {reasons}"
    )
    if point.first_wrong_answer:
        text += f"; the first wrong answer: {point.first_wrong_answer}"
    return text


def memory_unknown(launcher: str) -> str:
    """Why --max-memory cannot be judged: refused rather than silently never applied."""
    return (
        f"--max-memory reads the resident memory of the server's processes, which only a "
        f"local server started by triton-tune shows; on the {launcher} launcher's server it is "
        "unknown, so the constraint would never apply: leave out --max-memory (or let "
        "triton-tune start a local server: no --triton-url, --triton-launcher local)"
    )


def check_launcher(config: TritonConfig) -> None:
    """Stop before exporting anything when the chosen launcher cannot start here, naming
    what it lacks (a Docker engine, the image, a GPU, ...)."""
    gpu_auto = config.server.gpu and config.server.launcher == "auto"
    name: str = "GPU" if gpu_auto else config.server.launcher
    try:
        launcher = launcher_for(config)
        name = launcher.name
        if name == "container":  # its start would find these only after the export
            from pytest_triton.server.container import ContainerLauncher  # imports docker

            assert isinstance(launcher, ContainerLauncher)
            client = docker_client()
            ensure_image(client, launcher.settings.image)
            ensure_reaper(client)
    except ConfigError as exc:
        raise ConfigError(f"triton-tune cannot use the {name} launcher here: {exc}") from None


def runner_config(config: TritonConfig) -> TritonConfig:
    """The configuration candidates are served with: a server started here loads each one."""
    return config if config.server.url else config.with_overrides({"model_control": "explicit"})


def gpu_formats(config: TritonConfig, asked: Sequence[str]) -> tuple[str, ...]:
    """With --triton-gpu, the formats to tune: those asked for, each refused with the reason
    when the chosen server cannot serve it on its GPU; none asked, the first it can serve
    there (TorchScript on the bundled server, whose onnxruntime has no CUDA provider). The
    launcher's preflight runs first: no GPU stops here, before any export."""
    chosen = runner_config(config)
    check_launcher(chosen)
    target = launcher_for(chosen).target()
    if asked:
        return tuple(check_servable(fmt, target) for fmt in asked)
    return (default_format(target),)


class CandidateRunner:
    """The server, repository and load generator of one search; `close()` stops them all."""

    def __init__(
        self,
        spec: ModelSpec,
        source: str,
        size: str,
        formats: Sequence[str],
        config: TritonConfig,
        *,
        request_batch: int,
        constraints: Constraints,
        slo_ms: float | None = None,
        progress: Callable[[str], None] = print,
        precisions: Sequence[str] = ("fp32",),
        accuracy: AccuracyRule | None = None,
    ) -> None:
        self.spec = dataclasses.replace(spec, formats=tuple(formats))
        self.precisions = tuple(dict.fromkeys(("fp32", *precisions)))  # fp32: the reference
        self.accuracy = accuracy
        self._dataset: Dataset | None = None
        self.source, self.size = source, size
        self.formats = tuple(formats)
        self.request_batch = request_batch
        self.constraints = constraints
        self.slo_ms = slo_ms
        self.progress = progress
        if config.server.url:
            check_host(config.server.url, config.load.allow_remote)
        # else the launcher chosen (local, container, GPU), loading each candidate itself
        self.config = runner_config(config)
        self.repository: Repository | None = None
        self.deployment: Deployment | None = None
        self.generator: GeneratorProcess | None = None
        self.bases: dict[tuple[str, str], Variant] = {}  # (format, precision) -> exported
        self.current: Deployed | None = None
        self.deployed: dict[Candidate, Deployed] = {}  # every configuration deployed so far
        self.parity: dict[Candidate, str] = {}  # serving -> "" (passed) or the mismatch
        self.accuracies: dict[Candidate, AccuracyResult] = {}
        self.names: dict[Candidate, str] = {}

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        try:
            check_launcher(self.config)
            self.repository = Repository.create(
                [self.spec], precisions=self.precisions, progress=self.progress
            )
            self.deployment = start_deployment(self.config, self.repository)
            if self.deployment.server.model_control_mode != "explicit":
                raise ConfigError(
                    "triton-tune loads each candidate itself: the server must run with "
                    "--model-control-mode=explicit"
                )
            if self.constraints.max_memory_mb is not None and self.memory_mb() is None:
                raise ConfigError(memory_unknown(launcher_for(self.config).name))
            self.progress(
                f"candidates are served by the {launcher_for(self.config).name} launcher's "
                f"server at {self.deployment.server.endpoints.http}"
            )
            for variant in self.repository.variants:
                self.bases.setdefault((variant.format, variant.precision), variant)
            missing = [
                f"{f} {p}" if p != "fp32" else f
                for f in self.formats
                for p in self.precisions
                if (f, p) not in self.bases
            ]
            if missing:
                reasons = "; ".join(f"{u.id}: {u.reason}" for u in self.repository.unavailable)
                raise ConfigError(f"this server cannot serve {missing}: {reasons}")
            self.generator = self._generator()
        except BaseException:
            self.close()
            raise

    def _generator(self) -> GeneratorProcess:
        assert self.deployment is not None
        endpoints = self.deployment.server.endpoints
        chosen = self.config.client.protocol
        protocol: Protocol = "grpc" if chosen and chosen[0] == "grpc" else "http"
        secure = {"http": "https", "grpc": "grpcs"}
        host = f"{secure[protocol] if protocol in endpoints.tls else protocol}://"
        return GeneratorProcess(
            {
                "host": host + endpoints.url(protocol),
                "model": "",
                "source": self.source,
                "size": self.size,
                "format": self.formats[0],
                "stats_url": endpoints.url("http"),
                "stats_protocol": "http",
                "stats_tls": "http" in endpoints.tls,
                "config": as_values(self.config),
            }
        )

    def close(self) -> None:
        try:
            if self.generator is not None:
                self.generator.close()
            if self.config.server.url and self.deployment and self.current:
                # a running server is not ours to stop: leave no candidate loaded on it
                with contextlib.suppress(TritonTestError):
                    self.deployment.unload(self.current.variant)
        finally:
            self.generator = None
            self.current = None
            try:
                if self.deployment is not None:
                    self.deployment.close()
            finally:
                self.deployment = None
                if self.repository is not None:
                    self.repository.remove()
                self.repository = None

    # -- one candidate ---------------------------------------------------------------------
    def name_of(self, serving: Candidate) -> str:
        if serving not in self.names:
            base = self.bases[(serving.format, serving.precision)].model_name
            self.names[serving] = f"{base}_tune{len(self.names)}"
        return self.names[serving]

    def _deploy(self, serving: Candidate) -> Deployed:
        """The candidate's configuration loaded (the one before it unloaded)."""
        assert self.deployment is not None and self.repository is not None
        if self.current is not None and self.current.serving == serving:
            return self.current
        if self.current is not None:
            with contextlib.suppress(TritonTestError):
                self.deployment.unload(self.current.variant)
            self.current = None
        base = self.bases[(serving.format, serving.precision)]
        spec = serving.spec(self.spec, self.name_of(serving), thread_parameter(base))
        variant = self.repository.derive(base, spec)
        deployed = Deployed(serving, variant, self.repository.config(variant))
        self.deployed[serving] = deployed
        self.deployment.load(variant)
        self.current = deployed
        return deployed

    def _check(self, deployed: Deployed) -> str:
        """'' when the configuration answers like PyTorch (fp32: element-wise; with an
        accuracy rule, every precision: by the rule), else why not."""
        if deployed.serving.precision == "fp32":
            mismatch = self._check_parity(deployed)
            if mismatch:
                return mismatch
        if self.accuracy is None:
            return ""
        assert self.deployment is not None
        if self._dataset is None:
            self._dataset = self.accuracy.load(self.spec)
        batches, metric = self._dataset
        result = ServedModel(deployed.variant, self.deployment).measure_accuracy(
            self.deployment.client("http"),
            batches,
            metric,
            min_ratio=self.accuracy.min_ratio,
            name=self.accuracy.dataset,
        )
        self.accuracies[deployed.serving] = result
        if result.ok:
            return ""
        return (
            f"accuracy ratio {result.ratio:.4f} < {self.accuracy.min_ratio:g}: " + result.describe()
        )

    def _check_parity(self, deployed: Deployed) -> str:
        """'' when the configuration answers like PyTorch element-wise, else the mismatch."""
        assert self.deployment is not None
        model = ServedModel(deployed.variant, self.deployment)
        client = self.deployment.client("http")
        try:
            model.assert_parity(client, batch_size=self.request_batch)
            if self.spec.batched and deployed.serving.max_batch_size > 1:
                for _ in range(BATCHED_PARITY_TRIES if deployed.serving.dynamic_batching else 1):
                    seen = model.assert_batched_parity(client, requests=BATCHED_PARITY_REQUESTS)
                    if seen.execution_count < seen.success.count:
                        break  # requests shared an execution: the check saw batching
        except AssertionError as exc:
            return str(exc)
        return ""

    def memory_mb(self) -> float | None:
        """Resident memory of the server and its backends' processes (a local server)."""
        assert self.deployment is not None
        process = getattr(self.deployment.server, "process", None)
        if process is None:
            return None
        import psutil

        try:
            root = psutil.Process(process.pid)
            total: int = root.memory_info().rss
            for child in root.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += int(child.memory_info().rss)
        except psutil.Error:
            return None
        return float(total) / 2**20

    def measure(self, index: int, candidate: Candidate, committed: bool) -> Trial:
        """Deploy, check parity (once per configuration), measure."""
        began = time.monotonic()
        serving = candidate.serving
        trial = Trial(index, candidate, "failed", committed=committed)
        try:
            deployed = self._deploy(serving)
            trial.model_name = deployed.variant.model_name
            if serving not in self.parity:
                self.parity[serving] = self._check(deployed)
            result = self.accuracies.get(serving)
            if result is not None:
                trial.accuracy_ratio = result.ratio
                trial.accuracy = (
                    f"{result.metric} {result.served:.4f} vs {result.reference:.4f}, "
                    f"N={result.samples}"
                )
            if self.parity[serving]:
                trial.status = "disqualified"
                trial.message = self.parity[serving]
            else:
                self._measure(trial, deployed)
        except TritonTestError as exc:
            trial.status = "failed"
            trial.message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if self.current is not None and self.current.serving == serving:
                self.current = None  # reload it next time
        trial.seconds = time.monotonic() - began
        return trial

    def _measure(self, trial: Trial, deployed: Deployed) -> None:
        assert self.generator is not None
        memory_idle = self.memory_mb()
        answer: dict[str, Any] = self.generator.ask(
            {
                "op": "measure",
                "batch_size": self.request_batch,
                "concurrency": trial.candidate.concurrency,
                "percentile": 99,
                "model": deployed.variant.model_name,
                "slo_ms": self.slo_ms,
            }
        )
        point = Point(**{k: v for k, v in answer.items() if k in Point.__dataclass_fields__})
        memory = self.memory_mb()
        trial.status = "measured"
        trial.throughput = point.throughput
        trial.p99_ms = point.p99_ms
        trial.avg_ms = point.avg_ms
        trial.within_slo = math.nan if point.goodput is None else point.goodput
        trial.memory_mb = max(m for m in (memory_idle, memory) if m is not None) if memory else None
        trial.stable = point.stable
        trial.spread = windows_spread(point.windows)
        trial.point = point.as_dict()
        trial.violations = check_constraints(trial, self.constraints)
        trial.failed_requests = point.failed_requests
        trial.failure_reasons = point.failure_reasons
        problem = failed_under_load(point, self.config)
        if problem:  # a configuration that fails requests is no candidate, however fast
            trial.status = "disqualified"
            trial.message = problem
        elif not point.stable:
            trial.message = point.stability

    def config_of(self, serving: Candidate) -> mc.ModelConfig | None:
        deployed = self.deployed.get(serving)
        return deployed.config if deployed else None
