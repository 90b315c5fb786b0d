"""BERT for extractive question answering (SQuAD), the model of NVIDIA's BERT example.

A post-LayerNorm Transformer encoder with exact (erf) GELU, as in the original BERT, and a
linear span head producing one start and one end logit per token. Parameter names follow
the widely used ``bert.embeddings...``/``bert.encoder.layer.N...``/``qa_outputs`` layout so
existing SQuAD checkpoints load. The pooler is kept (unused by the QA head) because those
checkpoints carry it; without it bert-large would be 334.1M instead of 335.1M parameters.

The forward has no data-dependent control flow and builds the attention mask and position
ids from shapes only, so the same code scripts, traces and exports with dynamic batch and
sequence axes.

Tensors: ``input_ids``, ``token_type_ids``, ``attention_mask`` int64 [B, S] ->
``start_logits``, ``end_logits`` float32 [B, S]. Batch and sequence axes are dynamic
(S <= max_position_embeddings); ``Config.seq_length`` is the length clients send.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from pytest_triton.models._common import PathLike, init_layernorm, materialize

INPUT_NAMES: tuple[str, ...] = ("input_ids", "token_type_ids", "attention_mask")
OUTPUT_NAMES: tuple[str, ...] = ("start_logits", "end_logits")
DYNAMIC_AXES: dict[str, tuple[int, ...]] = {name: (1,) for name in INPUT_NAMES}  # sequence
OUTPUT_DYNAMIC_AXES: dict[str, tuple[int, ...]] = {name: (1,) for name in OUTPUT_NAMES}

DYNAMIC_AXIS_NAMES: dict[int, str] = {1: "sequence"}


@dataclass(frozen=True)
class Config:
    vocab_size: int = 30522
    hidden_size: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    intermediate_size: int = 4096
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    seq_length: int = 384
    with_pooler: bool = True

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} not divisible by num_heads {self.num_heads}"
            )
        if not 1 <= self.seq_length <= self.max_position_embeddings:
            raise ValueError(
                f"seq_length {self.seq_length} outside [1, {self.max_position_embeddings}]"
            )

    @classmethod
    def full(cls, seq_length: int = 384) -> Config:
        """BERT-large (24x1024, 16 heads); NVIDIA's BERT example benchmarks it at length 384."""
        return cls(seq_length=seq_length)

    large = full

    @classmethod
    def base(cls, seq_length: int = 128) -> Config:
        """BERT-base (12x768, 12 heads); NVIDIA's BERT example's figures use length 128."""
        return cls(
            hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
            seq_length=seq_length,
        )  # fmt: skip

    @classmethod
    def small(cls, seq_length: int = 32) -> Config:
        """2 layers, hidden 64, 2 heads, vocab 1000: same graph, CPU-test sized."""
        return cls(
            vocab_size=1000, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256,
            max_position_embeddings=128, seq_length=seq_length,
        )  # fmt: skip

    @classmethod
    def by_name(cls, name: str) -> Config:
        """``large-384``, ``large-128``, ``base-128``, ``base-384`` or ``small``."""
        if name == "small":
            return cls.small()
        size, _, seq = name.partition("-")
        if size in ("large", "base") and seq.isdigit():
            return cls.full(int(seq)) if size == "large" else cls.base(int(seq))
        raise ValueError(f"unknown BERT variant {name!r}: use large-<seq>, base-<seq> or small")

    def with_seq_length(self, seq_length: int) -> Config:
        return replace(self, seq_length=seq_length)


class Embeddings(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        # Positions from the shape, not a stored buffer: the sequence axis stays symbolic.
        positions = torch.arange(input_ids.size(1), dtype=torch.long, device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(positions).unsqueeze(0)
        out: torch.Tensor = self.LayerNorm(x)
        return out


class SelfAttention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        # [B, S, H*D] -> [B, H, S, D]; -1 for S keeps the traced graph free of baked sizes.
        return x.view(x.size(0), -1, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q = self._heads(self.query(hidden) * self.scale)
        k = self._heads(self.key(hidden))
        v = self._heads(self.value(hidden))
        probs = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) + mask, dim=-1)
        context = torch.matmul(probs, v).transpose(1, 2)  # [B, S, H, D]
        return context.reshape(hidden.size(0), -1, self.num_heads * self.head_dim)


class DenseLayerNorm(nn.Module):
    """Projection added back to the residual, then LayerNorm (post-LN, as in BERT)."""

    def __init__(self, in_features: int, config: Config) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.LayerNorm(self.dense(x) + residual)
        return out


class Attention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.self = SelfAttention(config)
        self.output = DenseLayerNorm(config.hidden_size, config)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.output(self.self(hidden, mask), hidden)
        return out


class Intermediate(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = DenseLayerNorm(config.intermediate_size, config)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attended = self.attention(hidden, mask)
        out: torch.Tensor = self.output(self.intermediate(attended), attended)
        return out


class Encoder(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Layer(config) for _ in range(config.num_layers)])

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            hidden = layer(hidden, mask)
        return hidden


class Pooler(nn.Module):
    """Present for checkpoint compatibility only; question answering does not use it."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)


class BertModel(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        if config.with_pooler:
            self.pooler = Pooler(config)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.embeddings(input_ids, token_type_ids)
        # [B, S] -> [B, 1, 1, S] additive mask: 0 where attended, -10000 at padding, as the
        # original BERT; finite (unlike -inf/finfo.min) so fp16 and ONNX runtimes stay NaN-free.
        # A literal because TorchScript cannot read module-level float globals.
        keep = attention_mask.unsqueeze(1).unsqueeze(2).to(hidden.dtype)
        mask = (1.0 - keep) * -10000.0
        out: torch.Tensor = self.encoder(hidden, mask)
        return out


class BertForQuestionAnswering(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.bert = BertModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.qa_outputs(hidden)  # [B, S, 2]
        return logits[:, :, 0], logits[:, :, 1]


def _init(model: BertForQuestionAnswering, gen: torch.Generator) -> None:
    """BERT's scheme: N(0, 0.02) weights and embeddings, zero biases, identity LayerNorms."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(0.0, 0.02, generator=gen)
            if isinstance(module, nn.Linear):
                assert module.bias is not None
                module.bias.zero_()
        elif isinstance(module, nn.LayerNorm):
            init_layernorm(module)


def construct(config: Config) -> BertForQuestionAnswering:
    return BertForQuestionAnswering(config)


def build(
    config: Config, seed: int = 0, checkpoint: PathLike | None = None
) -> BertForQuestionAnswering:
    return materialize(lambda: BertForQuestionAnswering(config), _init, seed, checkpoint)


def example_inputs(config: Config, batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """SQuAD-shaped features: [CLS] question [SEP] context [SEP] padding, per row.

    Row lengths vary so padding (attention_mask 0) is present; segment ids are 0 for the
    question and 1 for the context, as the QA head was trained with.
    """
    gen = torch.Generator().manual_seed(seed)
    s = config.seq_length
    ids = torch.randint(5, config.vocab_size, (batch_size, s), generator=gen)
    segments = torch.zeros(batch_size, s, dtype=torch.long)
    mask = torch.zeros(batch_size, s, dtype=torch.long)
    cls_id, sep_id = min(101, config.vocab_size - 1), min(102, config.vocab_size - 1)
    for row in range(batch_size):
        length = int(torch.randint(max(3, s // 2), s + 1, (1,), generator=gen)) if s >= 3 else s
        question = min(max(1, length // 4), max(1, length - 2))
        ids[row, 0] = cls_id
        if length >= 3:
            ids[row, question] = sep_id
            ids[row, length - 1] = sep_id
        segments[row, question + 1 : length] = 1
        mask[row, :length] = 1
        ids[row, length:] = 0  # [PAD]
    return {"input_ids": ids, "token_type_ids": segments, "attention_mask": mask}
