"""PipelineSpec: pre-processing, model(s) and post-processing written as PyTorch steps, served
as one Triton ensemble or as a python (BLS) model calling the steps, and composed in process
as the reference.

Each step becomes a ModelSpec of its own (exported and served like any model, in the format
its step asks for), so the exporters, the variant planning and the per-step references are
the single-model ones. A step's example inputs are the outputs of the steps before it on the
pipeline's example batch: a spec that cannot be composed (a tensor no step makes, an output
nothing consumes, a step that fails on what the step before it returns) is refused here,
naming the step and the tensor, before anything is exported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np
import torch

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import SpecError
from pytest_triton.base.formats import FORMATS, GPU_FORMATS
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.spec import (
    DynamicBatching,
    InputFactory,
    InstanceGroup,
    ModelSpec,
    name_problem,
)

Mode = Literal["ensemble", "bls", "bls-async"]
MODES: tuple[str, ...] = get_args(Mode)
FRONT_SUFFIX: dict[str, str] = {"ensemble": "", "bls": "_bls", "bls-async": "_bls_async"}
TRACED_FORMATS = ("torchscript-trace", "onnx", "onnx-trt", "tensorrt")


class FunctionModule(torch.nn.Module):
    """A pre/post-processing function of tensors as a module, so that the exporters trace it
    like any step (the served step runs the traced graph, not the Python source)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        super().__init__()
        self.function = function


# forward() with one named parameter per input: torch.export reads the signature (a *args
# forward would be one tuple input to it).
_FORWARDS: dict[int, Callable[..., Any]] = {
    1: lambda self, a: self.function(a),
    2: lambda self, a, b: self.function(a, b),
    3: lambda self, a, b, c: self.function(a, b, c),
    4: lambda self, a, b, c, d: self.function(a, b, c, d),
    5: lambda self, a, b, c, d, e: self.function(a, b, c, d, e),
    6: lambda self, a, b, c, d, e, f: self.function(a, b, c, d, e, f),
}


def function_module(function: Callable[..., Any], inputs: int) -> FunctionModule:
    """A FunctionModule whose forward takes exactly `inputs` tensors."""
    forward = _FORWARDS[inputs]
    cls = type(f"FunctionModule{inputs}", (FunctionModule,), {"forward": forward})
    module: FunctionModule = cls(function)
    return module


@dataclass(frozen=True)
class Step:
    """One step: a torch.nn.Module (or its class, built when first needed), or a function of
    tensors; it takes the pipeline tensors named in `inputs` (in forward()'s order) and
    returns those named in `outputs`. `format` None: the pipeline's `step_format`."""

    name: str
    run: torch.nn.Module | Callable[..., Any]
    inputs: Sequence[str]
    outputs: Sequence[str]
    format: str | None = None
    instance_group: InstanceGroup = field(default_factory=InstanceGroup)
    dynamic_batching: DynamicBatching | None = None  # None: the pipeline's

    @property
    def is_function(self) -> bool:
        """A plain function (traced) rather than a module or a module factory."""
        if isinstance(self.run, torch.nn.Module):
            return False
        return not (isinstance(self.run, type) and issubclass(self.run, torch.nn.Module))


@dataclass
class PipelineSpec:
    """Steps run in the order given; tensors are named once across the pipeline (a step's
    served inputs and outputs carry the pipeline's tensor names). `example_inputs` is one
    batch of the pipeline's inputs (batch axis first); `outputs` the tensors it answers.
    `modes` says how it is served: an `ensemble` (model `name`), a sync BLS python model
    (`name_bls`) and/or one whose execute is a coroutine calling `async_exec` (`name_bls_async`).
    """

    name: str
    steps: Sequence[Step]
    example_inputs: Mapping[str, torch.Tensor]
    outputs: Sequence[str]
    max_batch_size: int = 8
    dynamic_batching: DynamicBatching | None = field(default_factory=DynamicBatching)
    step_format: str = "torchscript-trace"
    modes: Sequence[str] = ("ensemble",)
    input_factory: InputFactory | None = None
    _steps: dict[str, ModelSpec] | None = field(default=None, init=False, repr=False)
    _natives: dict[str, NativeModel] = field(default_factory=dict, init=False, repr=False)

    @property
    def input_names(self) -> list[str]:
        return list(self.example_inputs)

    def front_name(self, mode: str) -> str:
        """The Triton model name a mode is served under (before any xdist suffix)."""
        return self.name + FRONT_SUFFIX[mode]

    def step_model_name(self, step: Step) -> str:
        return f"{self.name}_{step.name}"

    def step_format_of(self, step: Step) -> str:
        return step.format or self.step_format

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> None:
        """Raise SpecError naming the step and tensor that cannot be composed."""
        where = f"pipeline {self.name!r}"
        problem = name_problem(self.name, "pipeline name")
        if problem is not None:
            raise SpecError(problem)
        if not self.steps:
            raise SpecError(f"{where}: give at least one step")
        if not isinstance(self.max_batch_size, int) or self.max_batch_size < 1:
            raise SpecError(
                f"{where}: max_batch_size must be an integer >= 1 (every step is served "
                f"batched), got {self.max_batch_size!r}"
            )
        bad_modes = [m for m in self.modes if m not in MODES]
        if bad_modes or not self.modes:
            raise SpecError(f"{where}: modes {list(self.modes)}; choose from {', '.join(MODES)}")
        if not self.outputs:
            raise SpecError(f"{where}: declare at least one pipeline output")
        if not self.example_inputs:
            raise SpecError(f"{where}: example_inputs must name at least one input tensor")
        self._validate_steps(where)
        self._validate_flow(where)

    def _validate_steps(self, where: str) -> None:
        names = [s.name for s in self.steps]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SpecError(f"{where}: duplicate step names {dupes}")
        reserved = {suffix.lstrip("_") for suffix in FRONT_SUFFIX.values() if suffix}
        for step in self.steps:
            problem = name_problem(step.name, "step name")
            if problem is not None:
                raise SpecError(f"{where}: {problem}")
            if step.name in reserved:
                raise SpecError(
                    f"{where}: step {step.name!r}: the name is taken by a served mode "
                    f"({self.name}_{step.name}); rename the step"
                )
            if not step.inputs or not step.outputs:
                raise SpecError(f"{where}: step {step.name!r} needs inputs and outputs")
            fmt = self.step_format_of(step)
            if fmt not in FORMATS + GPU_FORMATS:
                raise SpecError(
                    f"{where}: step {step.name!r}: unknown export format {fmt!r}; choose "
                    f"from {', '.join(FORMATS + GPU_FORMATS)}"
                )
            if step.is_function and len(step.inputs) not in _FORWARDS:
                raise SpecError(
                    f"{where}: step {step.name!r} is a function of {len(step.inputs)} tensors; "
                    f"a function step takes 1 to {max(_FORWARDS)}: make it a torch.nn.Module"
                )
            if step.is_function and fmt not in TRACED_FORMATS:
                raise SpecError(
                    f"{where}: step {step.name!r} is a function, which is exported by "
                    f"tracing; format {fmt!r} cannot hold it: use one of "
                    f"{', '.join(TRACED_FORMATS)}, or make the step a torch.nn.Module"
                )

    def _validate_flow(self, where: str) -> None:
        made: dict[str, str] = {n: "the pipeline's inputs" for n in self.example_inputs}
        consumed: set[str] = set()
        for index, step in enumerate(self.steps):
            for tensor in step.inputs:
                if tensor not in made:
                    later = [s.name for s in self.steps[index:] if tensor in s.outputs]
                    hint = (
                        f"step {later[0]!r} makes it later: steps run in the order given "
                        "(a cycle shows up here)"
                        if later
                        else f"no step makes it and it is not a pipeline input "
                        f"({', '.join(self.example_inputs)})"
                    )
                    raise SpecError(f"{where}: step {step.name!r} input {tensor!r}: {hint}")
                consumed.add(tensor)
            for tensor in step.outputs:
                if tensor in made:
                    raise SpecError(
                        f"{where}: step {step.name!r} output {tensor!r} is already made by "
                        f"{made[tensor]}; name every tensor once"
                    )
                made[tensor] = f"step {step.name!r}"
        for tensor in self.outputs:
            if tensor not in made:
                raise SpecError(f"{where}: pipeline output {tensor!r} is made by no step")
        for tensor, maker in made.items():
            if tensor not in consumed and tensor not in self.outputs:
                raise SpecError(
                    f"{where}: {tensor!r} (made by {maker}) is consumed by no step and is not "
                    "a pipeline output: consume it, or list it in outputs"
                )

    # -- the steps as models ---------------------------------------------------------------
    def step_specs(self) -> list[ModelSpec]:
        """One ModelSpec per step, its examples taken from the steps before it (run once)."""
        if self._steps is None:
            self.validate()
            tensors = {n: _numpy(t) for n, t in self.example_inputs.items()}
            specs: dict[str, ModelSpec] = {}
            for step in self.steps:
                spec = self._step_spec(step, tensors)
                specs[step.name] = spec
                tensors.update(self._run(step, spec, tensors))
            self._steps = specs
        return list(self._steps.values())

    def step_spec(self, step: Step) -> ModelSpec:
        self.step_specs()
        assert self._steps is not None
        return self._steps[step.name]

    def _step_spec(self, step: Step, tensors: Mapping[str, Array]) -> ModelSpec:
        run = step.run
        module: torch.nn.Module | Callable[[], torch.nn.Module]
        module = function_module(run, len(step.inputs)) if step.is_function else run
        return ModelSpec(
            name=self.step_model_name(step),
            module=module,
            example_inputs={n: torch.from_numpy(np.array(tensors[n])) for n in step.inputs},
            inputs=list(step.inputs),
            outputs=list(step.outputs),
            max_batch_size=self.max_batch_size,
            dynamic_batching=step.dynamic_batching or self.dynamic_batching,
            instance_group=step.instance_group,
            formats=[self.step_format_of(step)],
            triton_name=self.step_model_name(step),
        )

    def _run(self, step: Step, spec: ModelSpec, tensors: Mapping[str, Array]) -> dict[str, Array]:
        """One step in PyTorch on the tensors so far; its failure names the step and what it
        was given (a dtype or shape the step before it returns and this one cannot take)."""
        native = self._natives.get(step.name)
        if native is None:
            native = self._natives[step.name] = NativeModel(spec)
        given = {n: tensors[n] for n in step.inputs}
        try:
            return native(given)
        except SpecError as exc:
            raise SpecError(f"pipeline {self.name!r}: step {step.name!r}: {exc}") from None
        except Exception as exc:  # the user's forward raises anything: name the step
            shapes = ", ".join(f"{n}: {a.dtype} {list(a.shape)}" for n, a in given.items())
            raise SpecError(
                f"pipeline {self.name!r}: step {step.name!r} failed on what it is given "
                f"({shapes}): {type(exc).__name__}: {exc}"
            ) from exc

    # -- the reference ---------------------------------------------------------------------
    def reference(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        """Every tensor of the pipeline (its inputs and each step's outputs) from the steps
        composed in PyTorch: the pipeline's answer and each step's own reference."""
        self.step_specs()
        tensors = {n: np.asarray(inputs[n]) for n in self.input_names}
        for step in self.steps:
            tensors.update(self._run(step, self.step_spec(step), tensors))
        return tensors

    def make_inputs(self, batch_size: int, seed: int = 0) -> dict[str, Array]:
        """A batch of the pipeline's inputs: `input_factory`'s, else rows of the example batch
        cycled (as ModelSpec.make_inputs)."""
        if self.input_factory is not None:
            made = self.input_factory(batch_size, seed)
            return {n: _numpy(made[n]) for n in self.input_names}
        probe = ModelSpec(
            name=self.name,
            module=torch.nn.Identity(),
            example_inputs=dict(self.example_inputs),
            inputs=self.input_names,
            outputs=["unused"],
            max_batch_size=self.max_batch_size,
        )
        return probe.make_inputs(batch_size, seed)


def _numpy(tensor: torch.Tensor) -> Array:
    return tensor.detach().cpu().numpy()
