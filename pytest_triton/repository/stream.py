"""A decoupled (streaming) model: the user's causal PyTorch generator, its greedy reference,
and its Triton model directory.

Token generation is what decoupled Triton models serve: one request, one response per token,
then a final flag. A StreamSpec takes any causal module (stream_greedy.py names the two kinds:
`forward(tokens) -> logits`, or one carrying a state with `initial_state()`); PyTorch's greedy
generation in process is the reference, and the served model (stream_model.py, a
python-backend model with `model_transaction_policy { decoupled: true }`) runs the module's
TorchScript artifact through the same greedy loop, one response per token through
`response_sender`. The zoo's examples are `models/tiny_generator.py` and `models/gru_lm.py`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.errors import SpecError
from pytest_triton.client.stream_interface import PROJECT, Prompt, StreamInterface
from pytest_triton.client.streaming import NO_STOP
from pytest_triton.parity.text_match import TextReference
from pytest_triton.repository import pbtxt, stream_greedy, torchscript_notice

MODEL_SOURCE = Path(__file__).with_name("stream_model.py")
GREEDY_SOURCE = Path(__file__).with_name("stream_greedy.py")
ARTIFACT = "model.pt"
TOKENIZER = "tokenizer.json"
BATCHING = {
    "none": "each stream generated to its end before the instance takes the next",
    "iteration": "the instance's streams advance one token each per step; a new stream joins "
    "between steps, a finished one leaves (iteration-level scheduling)",
}
TORCHSCRIPT = ("script", "trace")
TRACE_LENGTHS = (1, 3, 9)  # a trace must answer as the module at these prompt lengths


def _config_type(datatype: str) -> str:
    """Triton's wire datatype as model_config's TYPE_ suffix (BYTES is TYPE_STRING)."""
    return "STRING" if datatype == "BYTES" else datatype


@dataclass(frozen=True)
class StreamSpec:
    """A decoupled generator to serve: its name, `generator` (a callable building the causal
    module, in eval mode), the vocabulary its logits cover, its context (None: any length), its
    instances, the tensors it speaks (`interface`: pytest-triton's own layout, or a preset of
    client/stream_interface.py) and, for a text layout, its `tokenizer` (a
    `tokenizers.Tokenizer` whose ids are the module's); `batching` how an instance schedules
    its streams (BATCHING: "none", one at a time, or "iteration"; with "iteration", `fuse`
    lets streams at the same position share one forward where the module batches them
    exactly, False runs one forward per stream: what fusing is measured beside);
    `torchscript` how the module becomes TorchScript: "script" (torch.jit.script), or
    "trace" (torch.jit.trace, for a stateless module script cannot compile, e.g. a
    `transformers` model); `add_special_tokens` whether a text layout's prompt is encoded
    with the tokenizer's special tokens (a BOS, as vLLM encodes prompts), the server and the
    reference alike."""

    name: str = "tiny_stream"
    generator: Callable[[], nn.Module] | None = None
    vocab: int = 64
    context: int | None = None
    instances: int = 2
    interface: StreamInterface = PROJECT
    tokenizer: Any = None
    batching: str = "none"
    torchscript: str = "script"
    fuse: bool = True
    add_special_tokens: bool = True

    def __post_init__(self) -> None:
        if self.torchscript not in TORCHSCRIPT:
            raise SpecError(
                f"StreamSpec {self.name!r}: torchscript={self.torchscript!r}: give 'script' "
                "(torch.jit.script) or 'trace' (torch.jit.trace, stateless modules)"
            )
        if self.batching not in BATCHING:
            raise SpecError(
                f"StreamSpec {self.name!r}: batching={self.batching!r} is not a schedule: "
                + "; ".join(f"{key!r}: {meaning}" for key, meaning in BATCHING.items())
            )
        if self.generator is None:
            raise SpecError(
                f"StreamSpec {self.name!r} has no generator: pass generator=<a callable "
                "building your causal module>, or use the zoo's "
                "pytest_triton.models.tiny_generator.stream_spec()"
            )
        if self.interface.text and self.tokenizer is None:
            raise SpecError(
                f"StreamSpec {self.name!r} speaks the text layout {self.interface.layout!r}: "
                "give tokenizer=<a tokenizers.Tokenizer over the module's token ids>"
            )
        if self.vocab < 1:
            raise SpecError(f"StreamSpec {self.name!r}: vocab is {self.vocab}, give at least 1")

    def module(self) -> nn.Module:
        assert self.generator is not None  # __post_init__ refused None
        return self.generator()

    def prompts(self, count: int, length: int = 6, seed: int = 1) -> list[list[int]]:
        """`count` prompts of `length` tokens drawn from the vocabulary, reproducibly."""
        generator = torch.Generator().manual_seed(seed)
        drawn = torch.randint(0, self.vocab, (count, length), generator=generator)
        return [[int(t) for t in row] for row in drawn]


def generate(
    module: nn.Module,
    prompt: Sequence[int],
    max_tokens: int,
    stop_token: int = NO_STOP,
    *,
    vocab: int | None = None,
    context: int | None = None,
) -> list[int]:
    """Greedy generation in process: the tokens a right stream carries, in order (the stop
    token, when generated, is the last). `vocab` defaults to the module's first logits' width,
    `context` to its `context` attribute (none: no limit)."""
    if context is None:
        context = getattr(module, "context", None)
    if vocab is None:
        vocab = _logits_width(module)
    # the served model and the reference refuse the same requests with the same words
    problem = stream_greedy.problem_of(prompt, max_tokens, vocab, context)
    if problem:
        raise SpecError(problem)
    tokens = stream_greedy.greedy_tokens(module, prompt, max_tokens, stop_token, vocab)
    try:
        return list(tokens)
    except ValueError as exc:
        raise SpecError(f"{type(module).__name__}: {exc}") from None


def expected_text(
    spec: StreamSpec,
    module: nn.Module,
    prompt: Prompt,
    max_tokens: int,
    stop_token: int = NO_STOP,
) -> TextReference:
    """What a text layout's right stream carries: the prompt encoded as the server encodes
    it (the spec's tokenizer and special-token rule), its greedy ids, and their text decoded
    in the prompt's context."""
    prompt_ids = spec.interface.prompt_ids(prompt, spec.tokenizer, spec.add_special_tokens)
    ids = generate(
        module, prompt_ids, max_tokens, stop_token, vocab=spec.vocab, context=spec.context
    )
    return TextReference.of(spec.tokenizer, prompt_ids, ids, stop_token)


def _logits_width(module: nn.Module) -> int:
    """The width of the logits after one token (0): the vocabulary a module generates over."""
    with torch.inference_mode():
        feed = torch.tensor([[0]], dtype=torch.int64)
        stateful: Any = module  # initial_state is the module's own method, unknown to nn
        out: Any = (
            stateful(feed, torch.tensor(0), stateful.initial_state())
            if stream_greedy.carries_state(module)
            else module(feed)
        )
    logits = out[0] if isinstance(out, tuple) else out
    return int(logits.shape[-1])


def check_generator(spec: StreamSpec, module: nn.Module) -> None:
    """Refuse, before anything is written or loaded, a module whose forward does not map token
    ids to next-token logits of the spec's vocabulary (one greedy step on a two-token prompt)."""
    try:
        next(stream_greedy.greedy_tokens(module, [0, 0], 1, NO_STOP, spec.vocab))
    except Exception as exc:
        kind = "forward(tokens, start, state) -> (logits, state)"
        if not stream_greedy.carries_state(module):
            kind = "forward(tokens) -> logits"
        raise SpecError(
            f"StreamSpec {spec.name!r}: {type(module).__name__} does not generate as a causal "
            f"model ({kind}, token ids [1, T] int64, logits [1, {spec.vocab}]): "
            f"{type(exc).__name__}: {exc}"
        ) from None


def stream_config(spec: StreamSpec) -> mc.ModelConfig:
    """The decoupled python-backend model's ModelConfig (written with model_config_pb2)."""
    config = mc.ModelConfig(name=spec.name, backend="python", max_batch_size=0)
    config.model_transaction_policy.decoupled = True
    interface = spec.interface
    for tensor in interface.inputs():
        config.input.append(
            mc.ModelInput(
                name=tensor.name,
                data_type=mc.DataType.Value(f"TYPE_{_config_type(tensor.datatype)}"),
                dims=list(tensor.shape),
                optional=interface.optional(tensor),
            )
        )
    for tensor in interface.outputs():
        config.output.append(
            mc.ModelOutput(
                name=tensor.name,
                data_type=mc.DataType.Value(f"TYPE_{_config_type(tensor.datatype)}"),
                dims=list(tensor.shape),
            )
        )
    config.instance_group.append(
        mc.ModelInstanceGroup(count=spec.instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    )
    for key, value in {
        "artifact": ARTIFACT,
        "vocab": str(spec.vocab),
        "context": "" if spec.context is None else str(spec.context),
        "interface": interface.to_json(),
        "batching": spec.batching,
        "fuse": "1" if spec.fuse else "0",
        "add_special_tokens": "1" if spec.add_special_tokens else "0",
    }.items():
        config.parameters[key].string_value = value
    return config


def script(spec: StreamSpec, module: nn.Module) -> torch.jit.ScriptModule:
    """The module in TorchScript (what the served model loads), or a SpecError saying why not."""
    if spec.torchscript == "trace":
        return trace(spec, module)
    try:
        with torchscript_notice.torchscript_calls():
            return torch.jit.script(module)
    except Exception as exc:
        raise SpecError(
            f"StreamSpec {spec.name!r}: torch.jit.script cannot compile "
            f"{type(module).__name__} ({type(exc).__name__}: {str(exc).splitlines()[0]}); the "
            "served model loads TorchScript: make forward (and initial_state, if any) "
            "scriptable, or, for a stateless module, give torchscript='trace'"
        ) from None


def trace(spec: StreamSpec, module: nn.Module) -> torch.jit.ScriptModule:
    """A stateless module traced on a 4-token prompt, refused unless the trace answers as
    the module at other lengths (a trace keeps the shapes it saw wherever forward computed
    them from Python numbers)."""
    if stream_greedy.carries_state(module):
        raise SpecError(
            f"StreamSpec {spec.name!r}: torchscript='trace' serves stateless modules "
            f"(forward(tokens) -> logits); {type(module).__name__} carries a state "
            "(initial_state), which a trace drops: script it"
        )
    with torch.no_grad(), torchscript_notice.torchscript_calls():
        traced: torch.jit.ScriptModule = torch.jit.trace(
            module, torch.zeros(1, 4, dtype=torch.int64), check_trace=False
        )
        for length in TRACE_LENGTHS:
            tokens = (torch.arange(length, dtype=torch.int64) * 7 + 1) % spec.vocab
            want, got = module(tokens[None]), traced(tokens[None])
            if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
                raise SpecError(
                    f"StreamSpec {spec.name!r}: the trace of {type(module).__name__} does "
                    f"not answer as the module for a {length}-token prompt (traced on 4 "
                    "tokens; forward's shapes were fixed by the trace): script it instead"
                )
    return traced


def write_stream_model(root: Path, spec: StreamSpec, source: str | None = None) -> Path:
    """root/NAME/config.pbtxt and root/NAME/1/{model.py, stream_greedy.py, model.pt}: the
    spec's module checked and scripted with TorchScript, served by stream_model.py (or
    `source`, a model.py that builds on it)."""
    module = spec.module()
    check_generator(spec, module)
    scripted = script(spec, module)
    directory = root / spec.name
    version = directory / "1"
    version.mkdir(parents=True, exist_ok=True)
    with torchscript_notice.torchscript_calls():
        scripted.save(str(version / ARTIFACT))
    shutil.copyfile(GREEDY_SOURCE, version / GREEDY_SOURCE.name)
    if spec.tokenizer is not None:
        (version / TOKENIZER).write_text(spec.tokenizer.to_str())
    if source is None:
        shutil.copyfile(MODEL_SOURCE, version / "model.py")
    else:
        (version / "model.py").write_text(source)
    pbtxt.write_config(directory, stream_config(spec))
    return directory
