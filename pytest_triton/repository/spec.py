"""ModelSpec: what a user says about a PyTorch model so that it can be exported and served.

Everything a spec gets wrong is caught by `validate()` before any export starts, because an
export of a large model takes minutes and its errors rarely name the field that caused them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from pytest_triton.base.dtypes import Array, TensorType, tensor_type
from pytest_triton.base.errors import SpecError
from pytest_triton.base.formats import CPU_FORMATS, GPU_FORMATS

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def name_problem(name: object, what: str) -> str | None:
    """Why `name` cannot name a Triton model directory (a model, a pipeline, a step, a
    sequence model), or None."""
    if isinstance(name, str) and _NAME.match(name):
        return None
    return (
        f"{what} {name!r} is not a valid Triton model directory name: use letters, digits, "
        "'_', '-' and '.', starting with a letter or digit (no path separators)"
    )


InstanceKind = Literal["KIND_CPU", "KIND_GPU", "KIND_AUTO"]


@dataclass(frozen=True)
class TensorSpec:
    """A named input or output; dtype and dims default to what the example tensors show."""

    name: str
    dtype: object | None = None
    dims: tuple[int, ...] | None = None  # without the batch axis; -1 marks a dynamic axis


@dataclass(frozen=True)
class DynamicBatching:
    """Triton's dynamic_batching block (delay in microseconds, as config.pbtxt has it)."""

    max_queue_delay_microseconds: int = 0
    preferred_batch_size: tuple[int, ...] = ()
    preserve_ordering: bool = False


@dataclass(frozen=True)
class InstanceGroup:
    """Triton's instance_group: how many copies of the model run, and on what."""

    count: int = 1
    kind: InstanceKind | None = None  # None: the server's device (KIND_GPU on --triton-gpu)
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Int8:
    """How the INT8 variant is quantized (onnxruntime.quantization): declared on the spec,
    `ModelSpec(int8=Int8(...))`, so that the choice is seen, documented and part of the
    export cache's key. `Int8()` (or `int8=True`) is the quantizer's own default; what keeps
    a model's accuracy is a property of the model, measured with `assert_accuracy`."""

    # a scale per output channel of each weight; None: the method's default (static QDQ:
    # per channel, dynamic: one scale per weight tensor)
    per_channel: bool | None = None
    # dynamic: only MatMuls whose second operand is a constant weight (onnxruntime's
    # MatMulConstBOnly); products of two activations (attention's scores) stay fp32
    weights_only: bool = False
    # weights in 7 bits: AVX2 CPUs without VNNI multiply u8 x s8 with pairwise int16 sums
    # that saturate at full 8 bits (onnxruntime's advice for such CPUs)
    reduce_range: bool = False
    # only these operator types (e.g. ("MatMul", "Gemm")); (): the quantizer's defaults
    op_types: tuple[str, ...] = ()
    # the last N MatMul/Gemm nodes of the graph (the output head, whose rounding goes
    # straight into the answers) kept in fp32
    fp32_head: int = 0
    # nodes kept in fp32, by their name in the exported ONNX graph
    exclude_nodes: tuple[str, ...] = ()


TensorLike = str | TensorSpec
ExampleInputs = Mapping[str, torch.Tensor] | Sequence[torch.Tensor]
InputFactory = Callable[[int, int], Mapping[str, torch.Tensor]]


@dataclass
class ModelSpec:
    """One PyTorch model to export, serve and compare against.

    `module` may be a zero-argument callable so that building a large model is deferred
    until a test needs it. `example_inputs` is one batch (the batch axis first when
    `max_batch_size > 0`); it drives tracing, export shapes and the default parity inputs.
    `input_factory(batch_size, seed)` may be given to generate other batches (valid indices
    for embeddings, token ids...), returning tensors by input name; without it, rows of the
    example batch are cycled (see `make_inputs`).
    """

    name: str
    module: torch.nn.Module | Callable[[], torch.nn.Module]
    example_inputs: ExampleInputs
    inputs: Sequence[TensorLike]
    outputs: Sequence[TensorLike]
    max_batch_size: int = 0
    dynamic_axes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    dynamic_batching: DynamicBatching | None = None
    instance_group: InstanceGroup = field(default_factory=InstanceGroup)
    version: int = 1
    formats: Sequence[str] | None = None
    fp16: bool = False
    # int8: an INT8 ONNX variant too (onnxruntime.quantization: static QDQ calibrated on
    # `calibration` batches for models with convolutions, dynamic otherwise); an `Int8`
    # declares how (per-channel scales, weight MatMuls only, nodes kept in fp32)
    int8: bool | Int8 = False
    calibration: Callable[[], Iterable[Mapping[str, Any]]] | None = None
    input_factory: InputFactory | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    triton_name: str | None = None  # the model directory name, for a single-format spec
    warmup: int | None = None  # Triton model_warmup runs per sample; None: the setting's
    _module: torch.nn.Module | None = field(default=None, init=False, repr=False, compare=False)

    # -- derived views -------------------------------------------------------------------
    @property
    def input_specs(self) -> list[TensorSpec]:
        return [t if isinstance(t, TensorSpec) else TensorSpec(str(t)) for t in self.inputs]

    @property
    def output_specs(self) -> list[TensorSpec]:
        return [t if isinstance(t, TensorSpec) else TensorSpec(str(t)) for t in self.outputs]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.input_specs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.output_specs]

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    @property
    def int8_options(self) -> Int8:
        """How the INT8 variant is quantized: the declared `Int8`, else the defaults."""
        return self.int8 if isinstance(self.int8, Int8) else Int8()

    def example_tensors(self) -> dict[str, torch.Tensor]:
        """Example inputs by name, in the order forward() takes them."""
        ex = self.example_inputs
        if isinstance(ex, Mapping):
            return {name: ex[name] for name in self.input_names}
        return dict(zip(self.input_names, ex, strict=False))

    def torch_module(self) -> torch.nn.Module:
        """The module in eval mode, built once."""
        if self._module is None:
            mod = self.module if isinstance(self.module, torch.nn.Module) else self.module()
            if not isinstance(mod, torch.nn.Module):
                raise SpecError(
                    f"model {self.name!r}: module factory returned {type(mod).__name__}, "
                    "expected a torch.nn.Module"
                )
            self._module = mod.eval()
        return self._module

    def make_inputs(self, batch_size: int, seed: int = 0) -> dict[str, Array]:
        """A batch of inputs as numpy arrays (what goes on the wire): `input_factory`'s, else
        rows `seed, seed+1, ...` of the example batch, cycled, where a row used a second time
        gets a seeded nudge (floating inputs) so that no two requests are identical."""
        if self.input_factory is not None:
            made = self.input_factory(batch_size, seed)
            return {n: _to_numpy(made[n]) for n in self.input_names}
        ex = self.example_tensors()
        if not self.batched:
            return {n: _to_numpy(t) for n, t in ex.items()}
        rows = next(iter(ex.values())).shape[0]
        index = [(seed + i) % rows for i in range(batch_size)]
        repeated = torch.tensor([(seed + i) >= rows for i in range(batch_size)])
        generator = torch.Generator().manual_seed(seed)
        batch = {}
        for name, tensor in ex.items():
            rows_t = tensor[index].clone()
            if tensor.is_floating_point() and bool(repeated.any()):
                # Cycled rows get a seeded nudge so that no two requests are identical and a
                # reordered answer cannot pass for the right one.
                noise = torch.randn(rows_t.shape, generator=generator).to(rows_t.dtype)
                rows_t[repeated] += 0.1 * noise[repeated]
            batch[name] = _to_numpy(rows_t)
        return batch

    # -- validation ----------------------------------------------------------------------
    def validate(self, allowed_formats: Sequence[str] = CPU_FORMATS + GPU_FORMATS) -> None:
        """Raise SpecError naming the first field that cannot work, before any export."""
        where = f"model {self.name!r}"
        problem = name_problem(self.name, "model name")
        if problem is not None:
            raise SpecError(problem)
        if self.triton_name is not None:
            if not _NAME.match(self.triton_name):
                raise SpecError(
                    f"{where}: triton_name {self.triton_name!r} is not a valid Triton "
                    "model directory name (no path separators)"
                )
            if self.formats is None or len(self.formats) != 1:
                raise SpecError(
                    f"{where}: triton_name names one model directory, so give exactly one format"
                )
        if not isinstance(self.max_batch_size, int) or self.max_batch_size < 0:
            raise SpecError(
                f"{where}: max_batch_size must be an integer >= 0 (0 disables batching), "
                f"got {self.max_batch_size!r}"
            )
        if self.warmup is not None and (
            not isinstance(self.warmup, int) or isinstance(self.warmup, bool) or self.warmup < 0
        ):
            raise SpecError(
                f"{where}: warmup must be None or an integer >= 0 (Triton "
                f"model_warmup runs per sample; 0 = off), got {self.warmup!r}"
            )
        if not isinstance(self.version, int) or self.version < 1:
            raise SpecError(f"{where}: version must be an integer >= 1, got {self.version!r}")
        self._validate_int8(where)
        self._validate_tensors(where)
        self._validate_examples(where)
        self._validate_scheduling(where)
        for fmt in self.formats or ():
            if fmt not in allowed_formats:
                raise SpecError(
                    f"{where}: unknown export format {fmt!r}; choose from "
                    f"{', '.join(allowed_formats)}"
                )

    def _validate_int8(self, where: str) -> None:
        if not isinstance(self.int8, (bool, Int8)):
            raise SpecError(
                f"{where}: int8 must be True, False or an Int8(...) saying how to quantize, "
                f"got {self.int8!r}"
            )
        options = self.int8_options
        if not isinstance(options.fp32_head, int) or options.fp32_head < 0:
            raise SpecError(
                f"{where}: Int8.fp32_head must be an integer >= 0 (how many of the last "
                f"MatMul/Gemm nodes stay fp32), got {options.fp32_head!r}"
            )
        for field_name in ("op_types", "exclude_nodes"):
            value = getattr(options, field_name)
            if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
                raise SpecError(
                    f"{where}: Int8.{field_name} must be a tuple of names, e.g. "
                    f"{('MatMul', 'Gemm') if field_name == 'op_types' else ('node_name',)!r}, "
                    f"got {value!r}"
                )

    def _validate_tensors(self, where: str) -> None:
        for kind, specs in (("input", self.input_specs), ("output", self.output_specs)):
            if not specs:
                raise SpecError(f"{where}: declare at least one {kind} name")
            names = [s.name for s in specs]
            for s in specs:
                if not s.name or "/" in s.name or "\\" in s.name or s.name.strip() != s.name:
                    raise SpecError(f"{where}: {kind} name {s.name!r} is not a valid tensor name")
                if s.dtype is not None:
                    try:
                        tensor_type(s.dtype)
                    except SpecError as exc:
                        raise SpecError(f"{where}: {kind} {s.name!r}: {exc}") from None
                if s.dims is not None and any(
                    (not isinstance(d, int)) or d < -1 or d == 0 for d in s.dims
                ):
                    raise SpecError(
                        f"{where}: {kind} {s.name!r} dims {s.dims!r}: use positive sizes "
                        "or -1 for a dynamic axis (leave the batch axis out)"
                    )
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise SpecError(f"{where}: duplicate {kind} names {dupes}")
        for name, axes in self.dynamic_axes.items():
            if name not in self.input_names:
                raise SpecError(
                    f"{where}: dynamic_axes names {name!r}, which is not a declared input "
                    f"({', '.join(self.input_names)})"
                )
            for axis in axes:
                if self.batched and axis == 0:
                    raise SpecError(
                        f"{where}: dynamic_axes[{name!r}] lists axis 0, the batch axis, which "
                        "is always dynamic when max_batch_size > 0; list only other axes"
                    )

    def _validate_examples(self, where: str) -> None:
        ex = self.example_inputs
        names = self.input_names
        if isinstance(ex, Mapping):
            missing = [n for n in names if n not in ex]
            extra = [str(n) for n in ex if n not in names]
            if missing or extra:
                raise SpecError(
                    f"{where}: example_inputs do not match the declared inputs: "
                    f"missing {missing}, not declared {extra}"
                )
        elif isinstance(ex, Sequence) and not isinstance(ex, (str, bytes)):
            if len(ex) != len(names):
                raise SpecError(
                    f"{where}: {len(ex)} example input(s) given for {len(names)} declared "
                    f"input(s) {names}"
                )
        else:
            raise SpecError(
                f"{where}: example_inputs must be a dict name -> tensor or a sequence of "
                f"tensors, got {type(ex).__name__}"
            )
        batch_sizes = set()
        for spec, tensor in zip(self.input_specs, self.example_tensors().values(), strict=False):
            if not isinstance(tensor, torch.Tensor):
                raise SpecError(
                    f"{where}: example input {spec.name!r} is a {type(tensor).__name__}, "
                    "expected a torch.Tensor"
                )
            if spec.dtype is not None and tensor_type(spec.dtype).torch != tensor.dtype:
                raise SpecError(
                    f"{where}: example input {spec.name!r} has dtype {tensor.dtype}, but the "
                    f"input is declared {tensor_type(spec.dtype).wire}"
                )
            shape = tuple(tensor.shape)
            if self.batched:
                if not shape:
                    raise SpecError(
                        f"{where}: example input {spec.name!r} is a scalar; with "
                        "max_batch_size > 0 every example needs a leading batch axis"
                    )
                batch_sizes.add(shape[0])
                shape = shape[1:]
            if spec.dims is not None:
                ok = len(spec.dims) == len(shape) and all(
                    d == -1 or d == s for d, s in zip(spec.dims, shape, strict=False)
                )
                if not ok:
                    raise SpecError(
                        f"{where}: example input {spec.name!r} has shape {tuple(tensor.shape)}, "
                        f"which does not match declared dims {list(spec.dims)}"
                        + (" (after the batch axis)" if self.batched else "")
                    )
        if self.batched:
            if len(batch_sizes) > 1:
                raise SpecError(
                    f"{where}: example inputs disagree on the batch size: {sorted(batch_sizes)}"
                )
            (batch,) = batch_sizes
            if batch > self.max_batch_size:
                raise SpecError(
                    f"{where}: example batch size {batch} exceeds max_batch_size "
                    f"{self.max_batch_size}"
                )

    def _validate_scheduling(self, where: str) -> None:
        db = self.dynamic_batching
        if db is not None:
            if not self.batched:
                raise SpecError(
                    f"{where}: dynamic_batching needs max_batch_size > 0 (Triton batches "
                    "only models with a batch axis)"
                )
            if db.max_queue_delay_microseconds < 0:
                raise SpecError(f"{where}: max_queue_delay_microseconds must be >= 0")
            bad = [b for b in db.preferred_batch_size if b < 1 or b > self.max_batch_size]
            if bad:
                raise SpecError(
                    f"{where}: preferred_batch_size {bad} must lie in 1..max_batch_size "
                    f"({self.max_batch_size})"
                )
        ig = self.instance_group
        if ig.count < 1:
            raise SpecError(f"{where}: instance_group count must be >= 1, got {ig.count}")
        if ig.kind not in (None, "KIND_CPU", "KIND_GPU", "KIND_AUTO"):
            raise SpecError(
                f"{where}: instance_group kind {ig.kind!r}: use KIND_CPU, KIND_GPU or KIND_AUTO"
            )

    def declared_type(self, name: str) -> TensorType | None:
        for s in self.input_specs + self.output_specs:
            if s.name == name and s.dtype is not None:
                return tensor_type(s.dtype)
        return None


def _to_numpy(value: torch.Tensor | Array) -> Array:
    if isinstance(value, np.ndarray):
        return value
    return value.detach().cpu().contiguous().numpy()
