"""A decoupled (streaming) model: a small causal PyTorch generator, its greedy reference, and
its Triton model directory.

Token generation is what decoupled Triton models serve: one request, one response per token,
then a final flag. `TinyGenerator` is the smallest real case (an embedding and a positional
embedding over a fixed context, a two-layer GRU, a linear head; random weights from a seed).
PyTorch's greedy generation in process is the reference; the served model (stream_model.py, a
python-backend model with `model_transaction_policy { decoupled: true }`) runs the exported
TorchScript artifact of the same module, one response per token through `response_sender`.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.errors import SpecError
from pytest_triton.client.streaming import MAX_TOKENS, NO_STOP, POSITION, PROMPT, STOP_TOKEN, TOKEN
from pytest_triton.repository import pbtxt, torchscript_notice

MODEL_SOURCE = Path(__file__).with_name("stream_model.py")
ARTIFACT = "model.pt"


class TinyGenerator(nn.Module):
    """A causal model over `vocab` tokens and a fixed `context`: forward(tokens, h) gives the
    next token's logits after the last one and the GRU state, so generation feeds one token
    at a time after the prompt."""

    def __init__(self, vocab: int = 64, context: int = 64, dim: int = 32, hidden: int = 64):
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(context, dim)
        self.gru = nn.GRU(dim, hidden, num_layers=2, batch_first=True)
        # The head also sees the last token's embedding: a random GRU alone soon repeats one
        # token, and a stream of repeats would hide a model that ignores its prompt.
        self.head = nn.Linear(hidden + dim, vocab)
        with torch.no_grad():  # larger recurrent weights keep the prompt in the state longer
            for name, weight in self.gru.named_parameters():
                if name.startswith("weight"):
                    weight.mul_(3.0)

    def forward(
        self, tokens: torch.Tensor, start: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(tokens.shape[1]) + start
        x = self.embed(tokens) + self.position(positions).unsqueeze(0)
        out, state = self.gru(x, state)
        return self.head(torch.cat([out[:, -1], x[:, -1]], 1)), state


@dataclass(frozen=True)
class StreamSpec:
    """A decoupled generator to serve: name, seed of its random weights, sizes, instances."""

    name: str = "tiny_stream"
    seed: int = 0
    vocab: int = 64
    context: int = 64
    instances: int = 2

    def module(self) -> TinyGenerator:
        torch.manual_seed(self.seed)
        return TinyGenerator(self.vocab, self.context).eval()

    def prompts(self, count: int, length: int = 6, seed: int = 1) -> list[list[int]]:
        """`count` prompts of `length` tokens drawn from the vocabulary, reproducibly."""
        generator = torch.Generator().manual_seed(seed)
        drawn = torch.randint(0, self.vocab, (count, length), generator=generator)
        return [[int(t) for t in row] for row in drawn]


def check_prompt(prompt: Sequence[int], max_tokens: int, vocab: int, context: int) -> str | None:
    """Why a request cannot be generated (None when it can): the served model and the
    reference refuse the same requests with the same words."""
    if not prompt:
        return "the prompt is empty: send at least one token"
    if len(prompt) > context:
        return (
            f"the prompt has {len(prompt)} tokens, longer than the model's context of "
            f"{context}: shorten it to at most {context}"
        )
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        return f"prompt token {bad[0]} is outside the vocabulary [0, {vocab})"
    if max_tokens < 1:
        return f"MAX_TOKENS is {max_tokens}: ask for at least one token"
    if len(prompt) + max_tokens - 1 > context:
        return (
            f"{len(prompt)} prompt tokens + {max_tokens} new tokens need "
            f"{len(prompt) + max_tokens - 1} positions, more than the model's context of "
            f"{context}: ask for at most {context - len(prompt) + 1} new tokens"
        )
    return None


def generate(
    module: TinyGenerator, prompt: Sequence[int], max_tokens: int, stop_token: int = NO_STOP
) -> list[int]:
    """Greedy generation in process: the tokens a right stream carries, in order (the stop
    token, when generated, is the last)."""
    problem = check_prompt(prompt, max_tokens, module.head.out_features, module.context)
    if problem:
        raise SpecError(problem)
    hidden, layers = module.gru.hidden_size, module.gru.num_layers
    tokens: list[int] = []
    with torch.inference_mode():
        state = torch.zeros(layers, 1, hidden)
        feed = torch.tensor([list(prompt)], dtype=torch.int64)
        start = torch.tensor(0)
        for _ in range(max_tokens):
            logits, state = module(feed, start, state)
            token = int(torch.argmax(logits[0]))
            tokens.append(token)
            if token == stop_token:
                break
            start = start + feed.shape[1]
            feed = torch.tensor([[token]], dtype=torch.int64)
    return tokens


def stream_config(spec: StreamSpec) -> mc.ModelConfig:
    """The decoupled python-backend model's ModelConfig (written with model_config_pb2)."""
    config = mc.ModelConfig(name=spec.name, backend="python", max_batch_size=0)
    config.model_transaction_policy.decoupled = True
    config.input.extend(
        [
            mc.ModelInput(name=PROMPT, data_type=mc.TYPE_INT64, dims=[-1]),
            mc.ModelInput(name=MAX_TOKENS, data_type=mc.TYPE_INT32, dims=[1]),
            mc.ModelInput(name=STOP_TOKEN, data_type=mc.TYPE_INT32, dims=[1], optional=True),
        ]
    )
    config.output.extend(
        [
            mc.ModelOutput(name=TOKEN, data_type=mc.TYPE_INT64, dims=[1]),
            mc.ModelOutput(name=POSITION, data_type=mc.TYPE_INT32, dims=[1]),
        ]
    )
    config.instance_group.append(
        mc.ModelInstanceGroup(count=spec.instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    )
    for key, value in {
        "artifact": ARTIFACT,
        "vocab": str(spec.vocab),
        "context": str(spec.context),
    }.items():
        config.parameters[key].string_value = value
    return config


def write_stream_model(root: Path, spec: StreamSpec, source: str | None = None) -> Path:
    """root/NAME/config.pbtxt and root/NAME/1/{model.py, model.pt}: the spec's module
    scripted with TorchScript, served by stream_model.py (or `source`, a model.py that
    builds on it)."""
    directory = root / spec.name
    version = directory / "1"
    version.mkdir(parents=True, exist_ok=True)
    with torchscript_notice.torchscript_calls():
        torch.jit.script(spec.module()).save(str(version / ARTIFACT))
    if source is None:
        shutil.copyfile(MODEL_SOURCE, version / "model.py")
    else:
        (version / "model.py").write_text(source)
    pbtxt.write_config(directory, stream_config(spec))
    return directory
