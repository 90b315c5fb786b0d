"""A pipeline's served front models: the ensemble config (`ensemble_scheduling` with each
step's input_map / output_map) and the BLS python model (bls_model.py and its config), both
written through model_config_pb2; and PipelineRepository, a Repository that holds them beside
the step models.

The front models are written when the repository is planned for a server (they name the
planned step models, with any per-worker suffix), and cost no export: the steps are exported
when first loaded, as every variant is.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.errors import SpecError
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.repository import pbtxt
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.pipeline import PipelineSpec, Step
from pytest_triton.repository.signature import ServedTensor
from pytest_triton.repository.spec import ModelSpec
from pytest_triton.repository.variants import Variant

BLS_MODEL = Path(__file__).with_name("bls_model.py")
ASYNC_MARKER = "ASYNC = False"


class PipelineRepository(Repository):
    """A Repository of single-model specs plus pipelines: each pipeline's steps are specs of
    the repository, and its front models (ensemble, BLS) are written beside them."""

    pipelines: list[PipelineSpec]

    def __init__(self, root: Path, specs: Sequence[ModelSpec], **kwargs: object) -> None:
        self.pipelines = []
        # pipelines this server cannot serve, with the reason (their steps were not planned)
        self.unservable: dict[str, str] = {}
        super().__init__(root, specs, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def with_pipelines(
        cls,
        pipelines: Sequence[PipelineSpec],
        specs: Sequence[ModelSpec] = (),
        directory: str | Path | None = None,
        **kwargs: object,
    ) -> PipelineRepository:
        """Repository.create for `specs` plus every pipeline's steps (each pipeline validated
        and its steps run once in PyTorch before anything is exported)."""
        names = [p.name for p in pipelines]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SpecError(f"two pipelines are named {dupes}; pipeline names must be unique")
        steps = [spec for pipeline in pipelines for spec in pipeline.step_specs()]
        repo = cls.create([*specs, *steps], directory, **kwargs)  # type: ignore[arg-type]
        assert isinstance(repo, PipelineRepository)
        repo.pipelines = list(pipelines)
        return repo

    def plan(self, target: ServerTarget | Iterable[str]) -> list[Variant]:
        variants = super().plan(target)
        for pipeline in self.pipelines:
            try:
                for step in pipeline.steps:
                    self.step_variant(pipeline, step)
            except SpecError as exc:  # e.g. a run planned at fp16 only: the others still serve
                self.unservable[pipeline.name] = str(exc)
                continue
            for mode in pipeline.modes:
                self.write_front(pipeline, mode)
        return variants

    def pipeline(self, name: str) -> PipelineSpec:
        for pipeline in self.pipelines:
            if name == pipeline.name:
                return pipeline
        known = ", ".join(p.name for p in self.pipelines) or "none"
        raise SpecError(f"no pipeline {name!r} in the repository (it has: {known})")

    def step_variant(self, pipeline: PipelineSpec, step: Step) -> Variant:
        """The planned variant that serves a step (the step's one format, fp32)."""
        spec_name = pipeline.step_model_name(step)
        for variant in self.variants:
            if variant.spec.name == spec_name and variant.precision == "fp32":
                return variant
        reasons = [u.reason for u in self.unavailable if u.id.startswith(spec_name + "-")]
        raise SpecError(
            f"pipeline {pipeline.name!r}: step {step.name!r} ({pipeline.step_format_of(step)}) "
            f"cannot be served here: {'; '.join(reasons) or 'it was not planned at fp32'} "
            "(pipelines are served at fp32: add fp32 to --triton-precisions)"
        )

    def front_name(self, pipeline: PipelineSpec, mode: str) -> str:
        return pipeline.front_name(mode) + self.target.name_suffix

    def front_config(self, pipeline: PipelineSpec, mode: str) -> mc.ModelConfig:
        if mode == "ensemble":
            return self._ensemble_config(pipeline)
        return self._bls_config(pipeline, mode)

    def write_front(self, pipeline: PipelineSpec, mode: str) -> Path:
        """The front model's directory (config.pbtxt; BLS: 1/model.py), written in one rename."""
        name = self.front_name(pipeline, mode)
        directory = self.root / name
        staging = self.root / f"{name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        version = staging / "1"
        version.mkdir(parents=True)
        try:
            if mode != "ensemble":
                text = BLS_MODEL.read_text()
                if mode == "bls-async":
                    text = text.replace(ASYNC_MARKER, "ASYNC = True", 1)
                (version / "model.py").write_text(text)
            pbtxt.write_config(staging, self.front_config(pipeline, mode))
            shutil.rmtree(directory, ignore_errors=True)
            staging.rename(directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return directory

    def front_files(self, pipeline: PipelineSpec, mode: str) -> dict[str, bytes]:
        """The front model's version directory as Triton's load API takes it."""
        directory = self.root / self.front_name(pipeline, mode)
        return {
            f"file:{p.relative_to(directory).as_posix()}": p.read_bytes()
            for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != "config.pbtxt"
        }

    # -- configs ---------------------------------------------------------------------------
    def _io(self, pipeline: PipelineSpec, config: mc.ModelConfig) -> None:
        """The pipeline's inputs typed as the first step that takes each, its outputs as the
        step that makes each."""
        inputs: dict[str, ServedTensor] = {}
        outputs: dict[str, ServedTensor] = {}
        for step in pipeline.steps:
            signature = self.signature(pipeline.step_spec(step))
            for tensor in signature.inputs:
                if tensor.name in pipeline.input_names:
                    inputs.setdefault(tensor.name, tensor)
            for tensor in signature.outputs:
                if tensor.name in pipeline.outputs:
                    outputs[tensor.name] = tensor
        config.input.extend(pbtxt.tensor_message(mc.ModelInput, inputs[n]) for n in inputs)
        config.output.extend(
            pbtxt.tensor_message(mc.ModelOutput, outputs[n]) for n in pipeline.outputs
        )

    def _ensemble_config(self, pipeline: PipelineSpec) -> mc.ModelConfig:
        config = mc.ModelConfig(
            name=self.front_name(pipeline, "ensemble"),
            platform="ensemble",
            max_batch_size=pipeline.max_batch_size,
        )
        self._io(pipeline, config)
        for step in pipeline.steps:
            scheduled = config.ensemble_scheduling.step.add()
            scheduled.model_name = self.step_variant(pipeline, step).model_name
            scheduled.model_version = -1
            for tensor in step.inputs:
                scheduled.input_map[tensor] = tensor
            for tensor in step.outputs:
                scheduled.output_map[tensor] = tensor
        return config

    def _bls_config(self, pipeline: PipelineSpec, mode: str) -> mc.ModelConfig:
        config = mc.ModelConfig(
            name=self.front_name(pipeline, mode),
            backend="python",
            max_batch_size=pipeline.max_batch_size,
        )
        self._io(pipeline, config)
        pbtxt.set_dynamic_batching(config, pipeline.dynamic_batching)
        # The BLS model only moves tensors between steps: one CPU instance wherever the
        # steps run.
        config.instance_group.append(
            mc.ModelInstanceGroup(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
        )
        steps = [
            {
                "step": step.name,
                "model": self.step_variant(pipeline, step).model_name,
                "inputs": list(step.inputs),
                "outputs": list(step.outputs),
            }
            for step in pipeline.steps
        ]
        config.parameters["pipeline"].string_value = pipeline.name
        config.parameters["steps"].string_value = json.dumps(steps)
        return config
