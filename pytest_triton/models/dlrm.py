"""DLRM click-through-rate model with the model arguments of NVIDIA's DLRM example's deployer.py.

Numerical features go through a bottom MLP; each categorical feature selects a row of its
embedding table; the interaction combines them ("dot": pairwise dot products of the bottom
MLP output and all embeddings, strictly lower triangle unless ``self_interaction``, then
concatenated with the bottom MLP output; "cat": plain concatenation) and a top MLP ending in
one unit gives the click probability after a sigmoid.

All tables live in one fused ``nn.Embedding`` addressed through per-table row offsets, so the
exported graph has a single Gather instead of one per table. With ``hash_indices`` indices
are first taken modulo their table's size (NVIDIA's DLRM example deploys with ``--hash_indices``);
without it the caller must keep each index in ``[0, table_size)``, since an out-of-range
index would silently read a neighbouring table.

Tensors: ``numerical_features`` float32 [B, 13] (float16 when ``fp16``) and
``categorical_features`` int64 [B, num_tables] -> ``output`` [B, 1] (probability).
"""

# No ``from __future__ import annotations`` here: TorchScript cannot resolve the string form
# of the class-level buffer annotations on DLRM.

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import nn

from pytest_triton.models._common import PathLike, materialize

INPUT_NAMES: tuple[str, ...] = ("numerical_features", "categorical_features")
OUTPUT_NAMES: tuple[str, ...] = ("output",)
DYNAMIC_AXES: dict[str, tuple[int, ...]] = {}  # only the batch axis is dynamic

# Cardinalities of the 26 categorical columns of the Criteo Kaggle display-advertising data
# set (no frequency threshold). The full config hashes them into at most FULL_TABLE_CAP rows:
# 571,686 rows x 128 dims x 4 bytes = 293 MB of embeddings in fp32, instead of ~18 GB.
CRITEO_KAGGLE_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip
FULL_TABLE_CAP = 1 << 16
SMALL_TABLE_CAP = 1000


@dataclass(frozen=True)
class Config:
    """Model arguments of the DLRM deployer.py (``--embedding_dim``, ``--top_mlp_sizes``...)."""

    table_sizes: tuple[int, ...]
    num_numerical_features: int = 13
    embedding_dim: int = 128
    bottom_mlp_sizes: tuple[int, ...] = (512, 256, 128)
    top_mlp_sizes: tuple[int, ...] = (1024, 1024, 512, 256, 1)
    interaction_op: Literal["dot", "cat"] = "dot"
    self_interaction: bool = False
    hash_indices: bool = False
    fp16: bool = False
    feature_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.table_sizes or any(n <= 0 for n in self.table_sizes):
            raise ValueError(f"table_sizes must be positive, got {self.table_sizes!r}")
        if self.num_numerical_features <= 0 or not self.bottom_mlp_sizes:
            raise ValueError("DLRM needs numerical features and a non-empty bottom MLP")
        if self.bottom_mlp_sizes[-1] != self.embedding_dim:
            raise ValueError(
                f"last bottom MLP size {self.bottom_mlp_sizes[-1]} must equal embedding_dim "
                f"{self.embedding_dim}: the bottom MLP output is interacted with embeddings"
            )
        if not self.top_mlp_sizes or self.top_mlp_sizes[-1] != 1:
            raise ValueError(f"top MLP must end in 1 unit, got {self.top_mlp_sizes!r}")
        if self.interaction_op not in ("dot", "cat"):
            raise ValueError(f"interaction_op must be 'dot' or 'cat', got {self.interaction_op!r}")
        if self.feature_names is not None and len(self.feature_names) != len(self.table_sizes):
            raise ValueError("feature_names and table_sizes differ in length")

    @classmethod
    def full(cls) -> "Config":
        """The example's deploy command on Criteo-sized tables capped at 2**16 rows (see above)."""
        sizes = tuple(min(n, FULL_TABLE_CAP) for n in CRITEO_KAGGLE_CARDINALITIES)
        return cls(table_sizes=sizes, hash_indices=True)

    @classmethod
    def small(cls) -> "Config":
        """Same layer structure and interaction, 26 tables of <= 1000 rows, 16-dim embeddings."""
        sizes = tuple(min(n, SMALL_TABLE_CAP) for n in CRITEO_KAGGLE_CARDINALITIES)
        return cls(
            table_sizes=sizes,
            embedding_dim=16,
            bottom_mlp_sizes=(32, 16),
            top_mlp_sizes=(64, 32, 1),
            hash_indices=True,
        )

    @classmethod
    def from_model_size(
        cls, source: PathLike | Mapping[str, int] | Sequence[int], **kw: Any
    ) -> "Config":
        """Table sizes from a ``model_size.json`` (feature name -> cardinality, in file order)
        or a plain list; other fields from ``kw`` (defaults: NVIDIA's DLRM example's full model)."""
        data: Any = source
        if isinstance(source, (str, os.PathLike)):
            with open(source, encoding="utf-8") as fh:
                data = json.load(fh)
        if isinstance(data, Mapping):
            names = tuple(str(k) for k in data)
            sizes = tuple(data.values())
        elif isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
            names, sizes = None, tuple(data)
        else:
            raise TypeError(f"model size description must be an object or a list, got {data!r}")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in sizes):
            raise ValueError(f"table sizes must be integers, got {sizes!r}")
        kw.setdefault("feature_names", names)
        return cls(table_sizes=tuple(int(n) for n in sizes), **kw)

    def with_(self, **changes: Any) -> "Config":
        return replace(self, **changes)

    @property
    def num_tables(self) -> int:
        return len(self.table_sizes)

    @property
    def interaction_dim(self) -> int:
        """Width of the top MLP input."""
        n = self.num_tables + 1
        if self.interaction_op == "cat":
            return n * self.embedding_dim
        pairs = n * (n + 1) // 2 if self.self_interaction else n * (n - 1) // 2
        return self.embedding_dim + pairs

    @property
    def embedding_bytes(self) -> int:
        return sum(self.table_sizes) * self.embedding_dim * (2 if self.fp16 else 4)


def _mlp(sizes: Sequence[int], in_features: int, relu_last: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, size in enumerate(sizes):
        layers.append(nn.Linear(in_features, size))
        if relu_last or i < len(sizes) - 1:
            layers.append(nn.ReLU())
        in_features = size
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    table_sizes: torch.Tensor
    table_offsets: torch.Tensor
    pair_index: torch.Tensor

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.dot = config.interaction_op == "dot"
        self.hash_indices = config.hash_indices
        self.embedding_dim = config.embedding_dim
        self.bottom_mlp = _mlp(config.bottom_mlp_sizes, config.num_numerical_features, True)
        self.embeddings = nn.Embedding(sum(config.table_sizes), config.embedding_dim)
        self.top_mlp = _mlp(config.top_mlp_sizes, config.interaction_dim, False)
        # Derived from the config, not learned: non-persistent, so checkpoints hold weights only.
        self.register_buffer("table_sizes", torch.empty(config.num_tables, dtype=torch.long), False)
        self.register_buffer(
            "table_offsets", torch.empty(config.num_tables, dtype=torch.long), False
        )
        n = config.num_tables + 1
        pairs = n * (n + 1) // 2 if config.self_interaction else n * (n - 1) // 2
        self.register_buffer("pair_index", torch.empty(pairs, dtype=torch.long), False)
        self.reset_index_buffers()

    def reset_index_buffers(self) -> None:
        """Refill the derived index buffers (needed after ``to_empty``)."""
        sizes = torch.tensor(self.config.table_sizes, dtype=torch.long)
        n = self.config.num_tables + 1
        rows, cols = torch.tril_indices(n, n, 0 if self.config.self_interaction else -1)
        with torch.no_grad():
            self.table_sizes.copy_(sizes)
            self.table_offsets.copy_(torch.cumsum(sizes, 0) - sizes)
            self.pair_index.copy_(rows * n + cols)

    def forward(
        self, numerical_features: torch.Tensor, categorical_features: torch.Tensor
    ) -> torch.Tensor:
        bottom = self.bottom_mlp(numerical_features)  # [B, D]
        indices = categorical_features
        if self.hash_indices:
            indices = torch.remainder(indices, self.table_sizes)
        emb = self.embeddings(indices + self.table_offsets)  # [B, T, D]
        features = torch.cat([bottom.unsqueeze(1), emb], dim=1)  # [B, T+1, D]
        if self.dot:
            gram = torch.bmm(features, features.transpose(1, 2))  # [B, T+1, T+1]
            pairs = torch.index_select(gram.flatten(1), 1, self.pair_index)
            top_input = torch.cat([bottom, pairs], dim=1)
        else:
            top_input = features.flatten(1)
        return torch.sigmoid(self.top_mlp(top_input))


def _init(model: DLRM, gen: torch.Generator) -> None:
    """NVIDIA DLRM's scheme: Glorot-normal MLPs, U(+-1/sqrt(rows)) per embedding table."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            fan_out, fan_in = module.weight.shape
            module.weight.normal_(0.0, (2.0 / (fan_in + fan_out)) ** 0.5, generator=gen)
            assert module.bias is not None
            module.bias.normal_(0.0, fan_out**-0.5, generator=gen)
    start = 0
    for size in model.config.table_sizes:
        bound = size**-0.5
        model.embeddings.weight[start : start + size].uniform_(-bound, bound, generator=gen)
        start += size
    model.reset_index_buffers()


def construct(config: Config) -> DLRM:
    return DLRM(config)


def build(config: Config, seed: int = 0, checkpoint: PathLike | None = None) -> DLRM:
    """The model in eval mode (half precision if ``config.fp16``), seeded or loaded."""
    model = materialize(lambda: DLRM(config), _init, seed, checkpoint)
    return model.half() if config.fp16 else model


def example_inputs(config: Config, batch_size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """log(1 + count)-like non-negative numericals and in-range categorical indices."""
    gen = torch.Generator().manual_seed(seed)
    numerical = torch.log1p(
        torch.rand(batch_size, config.num_numerical_features, generator=gen) * 100
    )
    sizes = torch.tensor(config.table_sizes, dtype=torch.float64)
    uniform = torch.rand(batch_size, config.num_tables, generator=gen, dtype=torch.float64)
    categorical = (uniform * sizes).long().clamp_max_(sizes.long() - 1)
    if config.fp16:
        numerical = numerical.half()
    return {"numerical_features": numerical, "categorical_features": categorical}
