"""ServedPipeline: one pipeline served in one mode (ensemble, BLS, async BLS) on a Deployment,
with its parity check against the steps composed in PyTorch and the batching proof of each
composing model.

When the pipeline's answer parts from PyTorch's, each step's served model is asked alone
with PyTorch's inputs for that step: the report names the first step whose served output
diverges from its reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import ConfigError
from pytest_triton.client.stats import ModelStats, StatsWindow, assert_dynamic_batching
from pytest_triton.client.triton_client import TritonClient
from pytest_triton.parity.compare import ParityReport, Tolerance, compare_outputs, tolerance_for
from pytest_triton.parity.results import Check, ParityResult, transport_of
from pytest_triton.repository.pipeline import MODES, PipelineSpec, Step
from pytest_triton.repository.pipeline_build import PipelineRepository
from pytest_triton.session.deployment import Deployment, ServedModel


def served_pipeline(deployment: Deployment, name: str, mode: str = "ensemble") -> ServedPipeline:
    """The pipeline `name` of the deployment's repository, served in `mode` (loaded, with
    its steps, on first use)."""
    repository = deployment.repository
    if not isinstance(repository, PipelineRepository):
        raise ConfigError(
            f"pipeline {name!r}: the server's repository holds no pipelines; build it with "
            "factories.repository(..., pipelines=[...]) or PipelineRepository.with_pipelines"
        )
    spec = repository.pipeline(name)
    if mode not in spec.modes:
        raise ConfigError(
            f"pipeline {name!r} is not served as {mode!r} (modes {list(spec.modes)}); add it to "
            f"PipelineSpec(modes=...), one of {', '.join(MODES)}"
        )
    served = ServedPipeline(spec, deployment, mode)
    served.load()
    return served


@dataclass
class ServedPipeline:
    spec: PipelineSpec
    deployment: Deployment
    mode: str = "ensemble"

    @property
    def repository(self) -> PipelineRepository:
        repository = self.deployment.repository
        assert isinstance(repository, PipelineRepository)
        return repository

    @property
    def name(self) -> str:
        """The front model's Triton name (the ensemble, or the BLS model)."""
        return self.repository.front_name(self.spec, self.mode)

    @property
    def id(self) -> str:
        return f"{self.spec.name}-{self.mode}"

    def __repr__(self) -> str:
        return f"ServedPipeline({self.id} as {self.name!r})"

    def step(self, step: Step | str) -> ServedModel:
        """A step's served model (a model of its own: it answers alone too)."""
        if isinstance(step, str):
            step = next((s for s in self.spec.steps if s.name == step), None)  # type: ignore[assignment]
            if step is None:
                names = ", ".join(s.name for s in self.spec.steps)
                raise ConfigError(f"pipeline {self.spec.name!r} has no such step (it has {names})")
        assert isinstance(step, Step)
        return self.deployment.model(self.repository.step_variant(self.spec, step))

    def load(self) -> None:
        """Export and load every step, then the front model (once)."""
        for step in self.spec.steps:
            self.deployment.load(self.repository.step_variant(self.spec, step))
        self.deployment.load_front(
            self.name,
            lambda: self.repository.front_config(self.spec, self.mode),
            lambda: self.repository.front_files(self.spec, self.mode),
        )

    # -- requests ---------------------------------------------------------------------------
    def inputs(self, batch_size: int = 2, seed: int = 0) -> dict[str, Array]:
        return self.spec.make_inputs(batch_size, seed)

    def reference(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        """Every tensor of the pipeline composed in PyTorch (inputs, each step's outputs)."""
        return self.spec.reference(inputs)

    def infer(self, client: TritonClient, inputs: Mapping[str, Array]) -> dict[str, Array]:
        return client.infer(self.name, inputs, list(self.spec.outputs))

    # -- parity -----------------------------------------------------------------------------
    def _tolerances(
        self, tolerances: Mapping[str, Tolerance] | None, reference: Mapping[str, Array]
    ) -> dict[str, Tolerance]:
        """Per tensor: the caller's, else the tolerance of the format of the step making it."""
        target = self.repository.target
        chosen: dict[str, Tolerance] = {}
        for step in self.spec.steps:
            fmt = self.spec.step_format_of(step)
            for name in step.outputs:
                chosen[name] = tolerance_for(
                    fmt, reference[name].dtype, "gpu" if target.gpu else "cpu", target.numerics
                )
        chosen.update(tolerances or {})
        return chosen

    def _context(self, client: TritonClient, what: str) -> str:
        context = f"{what}, protocol {client.protocol!r}"
        transport = transport_of(client)
        if transport != "none":
            context += f", transport {transport!r}"
        return context

    def assert_parity(
        self,
        client: TritonClient,
        inputs: Mapping[str, Array] | None = None,
        *,
        batch_size: int = 2,
        seed: int = 0,
        tolerances: Mapping[str, Tolerance] | None = None,
    ) -> ParityReport:
        """One request to the front model; every pipeline output must match the steps
        composed in PyTorch. On a mismatch the AssertionError also names the first step whose
        served model, given PyTorch's inputs for it, answers otherwise than its reference."""
        if inputs is None:
            inputs = self.inputs(batch_size, seed)
        reference = self.reference(inputs)
        expected = {n: reference[n] for n in self.spec.outputs}
        served = _shaped(self.infer(client, inputs), expected)
        report = compare_outputs(
            expected,
            served,
            context=self._context(
                client, f"pipeline {self.spec.name!r} ({self.mode} {self.name!r})"
            ),
            tolerances=self._tolerances(tolerances, reference),
        )
        step, divergence = (
            (None, "") if report.ok else self._divergence(client, reference, tolerances)
        )
        self._record(
            client,
            "pipeline_parity",
            [report],
            batch_size=len(next(iter(inputs.values()))),
            first_diverging_step=step,
            divergence=divergence.splitlines()[0] if divergence else "",
        )
        if not report.ok:
            raise AssertionError(report.describe() + "\n" + divergence)
        return report

    def step_reports(
        self,
        client: TritonClient,
        reference: Mapping[str, Array],
        tolerances: Mapping[str, Tolerance] | None = None,
    ) -> list[tuple[Step, ParityReport]]:
        """Each step's served model asked alone with PyTorch's inputs for it, compared with
        that step's reference outputs, in pipeline order."""
        chosen = self._tolerances(tolerances, reference)
        reports = []
        for step in self.spec.steps:
            model = self.step(step)
            given = {n: reference[n] for n in step.inputs}
            expected = {n: reference[n] for n in step.outputs}
            served = _shaped(client.infer(model.name, given, list(step.outputs)), expected)
            context = self._context(
                client,
                f"pipeline {self.spec.name!r} step {step.name!r} (model {model.name!r}, "
                f"backend {model.id!r})",
            )
            reports.append(
                (step, compare_outputs(expected, served, context=context, tolerances=chosen))
            )
        return reports

    def first_divergence(
        self,
        client: TritonClient,
        reference: Mapping[str, Array],
        tolerances: Mapping[str, Tolerance] | None = None,
    ) -> str:
        """Which step parts from PyTorch first, each step served alone on PyTorch's inputs."""
        return self._divergence(client, reference, tolerances)[1]

    def _divergence(
        self,
        client: TritonClient,
        reference: Mapping[str, Array],
        tolerances: Mapping[str, Tolerance] | None = None,
    ) -> tuple[str | None, str]:
        """The first diverging step's name (None: no step alone diverges) and what it says."""
        for step, report in self.step_reports(client, reference, tolerances):
            if not report.ok:
                return step.name, f"first diverging step: {step.name!r}\n" + report.describe()
        return None, (
            "every step served alone answers like its PyTorch reference: the divergence comes "
            "from the composition (the front model's tensor mapping), or from differences "
            "within tolerance that grew across steps"
        )

    def _record(
        self,
        client: TritonClient,
        check: Check,
        reports: list[ParityReport],
        *,
        batch_size: int,
        **pipeline: Any,
    ) -> None:
        """The check as a ParityResult for the deployment's listeners (the gate report's
        parity table, and its pipelines section from `pipeline`)."""
        formats = dict.fromkeys(self.spec.step_format_of(step) for step in self.spec.steps)
        self.deployment.record(
            ParityResult(
                variant=self.id,
                model=self.spec.name,
                triton_model=self.name,
                format="+".join(formats),
                precision="fp32",
                backend="ensemble" if self.mode == "ensemble" else "python",
                device="gpu" if self.repository.target.gpu else "cpu",
                **self.deployment.check_fields(client, check, batch_size, reports),
                pipeline={
                    "pipeline": self.spec.name,
                    "mode": self.mode,
                    "front_model": self.name,
                    "steps": [step.name for step in self.spec.steps],
                    **pipeline,
                },
            )
        )

    # -- batching ---------------------------------------------------------------------------
    def assert_step_batching(
        self,
        client: TritonClient,
        requests: int = 8,
        *,
        seed: int = 0,
        min_batch_size: int = 2,
        tolerances: Mapping[str, Tolerance] | None = None,
    ) -> dict[str, ModelStats]:
        """N single-row requests to the front model in flight together: each answer must equal
        the pipeline composed in PyTorch on that row, and every composing model's statistics
        must show dynamic batching (the front model's own statistics cannot: an ensemble does
        not batch). Returns the statistics delta per step name, and the front model's under
        its Triton name."""
        rows = self.inputs(requests, seed)
        singles = [{n: a[i : i + 1] for n, a in rows.items()} for i in range(requests)]
        models = {step.name: self.step(step).name for step in self.spec.steps}
        models[self.name] = self.name
        with contextlib.ExitStack() as stack:
            windows = {
                key: stack.enter_context(StatsWindow(client, model, expect_requests=requests))
                for key, model in models.items()
            }
            answers = client.infer_many(self.name, singles, list(self.spec.outputs))
        reports = []
        for single, answer in zip(singles, answers, strict=True):
            reference = self.reference(single)
            expected = {n: reference[n] for n in self.spec.outputs}
            reports.append(
                compare_outputs(
                    expected,
                    _shaped(answer, expected),
                    context=self._context(client, f"pipeline {self.spec.name!r} ({self.mode})"),
                    tolerances=self._tolerances(tolerances, reference),
                )
            )
        deltas = {key: window.delta for key, window in windows.items()}
        failures = []
        for step in self.spec.steps:
            try:
                assert_dynamic_batching(deltas[step.name], min_batch_size=min_batch_size)
            except AssertionError as exc:
                failures.append(
                    f"pipeline {self.spec.name!r} step {step.name!r} (model "
                    f"{models[step.name]!r}): {exc}"
                )
        self._record(
            client,
            "pipeline_batching",
            reports,
            batch_size=1,
            batching=[
                _batching(step.name, models[step.name], deltas[step.name], min_batch_size)
                for step in self.spec.steps
            ],
            front=_batching(self.name, self.name, deltas[self.name], min_batch_size),
        )
        for index, report in enumerate(reports):
            if not report.ok:
                raise AssertionError(
                    f"request {index} of {requests} sent together: {report.describe()}"
                )
        if failures:
            raise AssertionError(failures[0])
        return deltas


def _batching(step: str, model: str, delta: ModelStats, min_batch_size: int) -> dict[str, Any]:
    """One composing model's batching proof, as the gate report shows it (`batched`: what
    assert_dynamic_batching asks)."""
    try:
        assert_dynamic_batching(delta, min_batch_size=min_batch_size)
        batched = True
    except AssertionError:
        batched = False
    return {
        "step": step,
        "model": model,
        "requests": delta.requests,
        "executions": delta.execution_count,
        "inferences": delta.inference_count,
        "avg_batch_size": delta.avg_batch_size,
        "batch_histogram": {str(k): v for k, v in sorted(delta.batches.items())},
        "batched": batched,
    }


def _shaped(served: dict[str, Array], expected: Mapping[str, Array]) -> dict[str, Array]:
    """Per-row scalars travel as [batch, 1] (Triton's dims [1] with an empty reshape): give
    them back PyTorch's shape."""
    for name, native in expected.items():
        array = served.get(name)
        if array is not None and array.shape == (*native.shape, 1):
            served[name] = array.reshape(native.shape)
    return served
