"""SequenceSpec: a stateful PyTorch model, `step(x, state) -> (y, state)`, served behind Triton's
sequence batcher, and its reference: the module stepped N times from its initial state.

A sequence is one client's stream of requests (a speech utterance, a user's session): the
answer to its n-th request depends on the n requests before it and on nothing else. Parity is
therefore per sequence: the served answers of a sequence equal the module stepped over the
same inputs from the initial state, and the first step where they part is named.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from pytest_triton.base.dtypes import Array, tensor_type
from pytest_triton.base.errors import SpecError
from pytest_triton.repository.spec import name_problem

Strategy = Literal["direct", "oldest"]
STRATEGIES: tuple[Strategy, ...] = ("direct", "oldest")
StepFactory = Callable[[int, int], torch.Tensor]  # (sequence seed, step) -> one step's input


@dataclass
class SequenceSpec:
    """A stateful model: `module(x, state)` returns `(y, new_state)` for a batch of rows, one
    row per sequence; `initial_state` is one sequence's state before its first request
    (without the batch axis); `example_input` is one request's input (without the batch axis).

    `strategy` is the sequence batcher's: "direct" gives each sequence a batch slot of an
    instance until it ends (`max_candidate_sequences` slots per instance); "oldest" batches
    the oldest requests of up to `max_candidate_sequences` sequences dynamically.
    `step_inputs(seed, step)` makes a sequence's inputs (default: random normal rows shaped
    as the example). `fmt` is the TorchScript export: "torchscript-script" keeps buffers and
    control flow, "torchscript-trace" follows the example.
    """

    name: str
    module: torch.nn.Module | Callable[[], torch.nn.Module]
    initial_state: torch.Tensor
    example_input: torch.Tensor
    input_name: str = "INPUT"
    output_name: str = "OUTPUT"
    strategy: Strategy = "direct"
    max_batch_size: int = 16
    max_candidate_sequences: int = 16
    max_sequence_idle_microseconds: int = 1_000_000  # Triton's default
    max_queue_delay_microseconds: int = 0  # the oldest strategy's wait for a fuller batch
    instance_count: int = 1
    fmt: Literal["torchscript-script", "torchscript-trace"] = "torchscript-script"
    step_inputs: StepFactory | None = None
    _module: torch.nn.Module | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def model_name(self) -> str:
        """The Triton model name: the spec's name and its strategy (two strategies of one
        spec can be served side by side)."""
        return f"{self.name}_{self.strategy}"

    @property
    def sequences_in_flight(self) -> int:
        """How many sequences the batcher serves at once; more wait in its backlog until one
        ends (direct: a slot per batch row of each instance)."""
        if self.strategy == "direct":
            return self.max_batch_size * self.instance_count
        return self.max_candidate_sequences

    def torch_module(self) -> torch.nn.Module:
        if self._module is None:
            mod = self.module if isinstance(self.module, torch.nn.Module) else self.module()
            if not isinstance(mod, torch.nn.Module):
                raise SpecError(
                    f"sequence spec {self.name!r}: `module` must be a torch.nn.Module or a "
                    f"callable returning one, got {type(mod).__name__}"
                )
            self._module = mod.eval()
        return self._module

    def validate(self) -> None:
        """Every mistake a spec can make, named before anything is exported."""
        where = f"sequence spec {self.name!r}"
        problem = name_problem(self.name, "sequence spec name")
        if problem is not None:
            raise SpecError(problem)
        if self.strategy not in STRATEGIES:
            raise SpecError(
                f"{where}: strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}"
            )
        if self.max_batch_size < 1:
            raise SpecError(
                f"{where}: max_batch_size must be >= 1 (the sequence batcher batches one row "
                f"per sequence), got {self.max_batch_size}"
            )
        for label, value in (
            ("max_candidate_sequences", self.max_candidate_sequences),
            ("max_sequence_idle_microseconds", self.max_sequence_idle_microseconds),
            ("instance_count", self.instance_count),
        ):
            if value < 1:
                raise SpecError(f"{where}: {label} must be >= 1, got {value}")
        if self.input_name == self.output_name or "" in (self.input_name, self.output_name):
            raise SpecError(f"{where}: input_name and output_name must be two different names")
        for label, tensor in (
            ("initial_state", self.initial_state),
            ("example", self.example_input),
        ):
            if not isinstance(tensor, torch.Tensor):
                raise SpecError(f"{where}: {label} must be a torch.Tensor")
            tensor_type(tensor.dtype)  # a dtype Triton cannot carry raises SpecError-like
        y, state = self.step(self.example_input[None], self.initial_state[None])
        if tuple(state.shape) != (1, *self.initial_state.shape):
            raise SpecError(
                f"{where}: step(x, state) returned a state of shape {tuple(state.shape)}, "
                f"but the initial state is {tuple(self.initial_state.shape)} per sequence: "
                "the state a step returns must have the initial state's shape"
            )
        if state.dtype != self.initial_state.dtype:
            raise SpecError(
                f"{where}: step(x, state) returned a {state.dtype} state, the initial state "
                f"is {self.initial_state.dtype}"
            )
        if y.shape[0] != 1:
            raise SpecError(f"{where}: step(x, state)'s output must keep the batch axis first")

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of the module, checked to return (output, state). The module's buffers
        are put back afterwards: checking a spec must not change what is exported."""
        module = self.torch_module()
        buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
        try:
            with torch.inference_mode():
                out = module(x, state)
        except Exception as exc:  # the user's module raises anything: name the spec and shapes
            raise SpecError(
                f"sequence spec {self.name!r}: module(x, state) failed on x of shape "
                f"{tuple(x.shape)} and state of shape {tuple(state.shape)} (example_input and "
                f"initial_state with a batch axis): {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            with torch.no_grad():
                for name, b in module.named_buffers():
                    b.copy_(buffers[name])
        if not (isinstance(out, tuple) and len(out) == 2):
            raise SpecError(
                f"sequence spec {self.name!r}: module(x, state) must return (y, new_state), "
                f"got {type(out).__name__}"
            )
        return out[0], out[1]

    @property
    def output_dims(self) -> tuple[int, ...]:
        y, _ = self.step(self.example_input[None], self.initial_state[None])
        return tuple(y.shape[1:])

    def inputs_for(self, seed: int, length: int) -> list[Array]:
        """A sequence's inputs, one [1, ...] row per request."""
        rows = []
        for step in range(length):
            if self.step_inputs is not None:
                x = self.step_inputs(seed, step)
            else:
                g = torch.Generator().manual_seed(seed * 100_003 + step)
                shape = self.example_input.shape
                x = torch.randn(shape, generator=g).to(self.example_input.dtype)
            rows.append(np.ascontiguousarray(x.detach().cpu().numpy())[None])
        return rows


@dataclass(frozen=True)
class SequencePlan:
    """One sequence to send: its correlation id and its inputs, one per request."""

    sequence_id: int
    inputs: tuple[Array, ...]

    @property
    def length(self) -> int:
        return len(self.inputs)


def plan_sequences(
    spec: SequenceSpec,
    count: int,
    *,
    id_range: tuple[int, int] = (1, 2**31),
    length: int = 8,
    variation: float = 0.2,
    seed: int = 0,
) -> list[SequencePlan]:
    """`count` sequences as perf_analyzer makes them: ids from `id_range` (start, end
    exclusive, as --sequence-id-range) in turn, lengths around `length` varied by up to
    +-`variation` of it (as --sequence-length and --sequence-length-variation)."""
    start, end = id_range
    if end - start < count:
        raise SpecError(
            f"sequence id range {start}:{end} holds {end - start} ids, fewer than the "
            f"{count} sequences in flight: each sequence in flight needs its own id"
        )
    if length < 1:
        raise SpecError(f"a sequence needs at least one request, got length {length}")
    rng = np.random.default_rng(seed)
    spread = round(length * variation)
    plans = []
    for i in range(count):
        n = max(1, length + int(rng.integers(-spread, spread + 1))) if spread else length
        plans.append(SequencePlan(start + i, tuple(spec.inputs_for(seed * 1_000 + i, n))))
    return plans


class SequenceReference:
    """The module stepped over a sequence's inputs from its initial state, in process.

    Each sequence runs on its own copy of the module: a served sequence starts afresh, and a
    module that keeps anything in a buffer must not carry it from one reference to the next."""

    def __init__(self, spec: SequenceSpec) -> None:
        self.spec = spec

    def outputs(self, inputs: Sequence[Array]) -> list[Array]:
        module = copy.deepcopy(self.spec.torch_module())
        state = self.spec.initial_state[None].clone()
        answers = []
        with torch.inference_mode():
            for x in inputs:
                y, state = module(torch.from_numpy(np.asarray(x)), state)
                answers.append(y.detach().cpu().numpy().copy())
        return answers

    def expected(self, plans: Sequence[SequencePlan]) -> dict[int, list[Array]]:
        """Each planned sequence's right answers, by sequence id."""
        return {p.sequence_id: self.outputs(p.inputs) for p in plans}
