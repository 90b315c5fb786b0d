"""The zoo's entries: each model module with its configs and the examples' serving settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import torch

from pytest_triton.models import bert, dlrm, mnist, resnext, text_recognition
from pytest_triton.models._common import PathLike

Size = Literal["full", "small"]


@dataclass(frozen=True)
class Serving:
    """Recommended config.pbtxt settings; field names follow Triton's model config.

    ``max_queue_delay_microseconds`` 0 with ``dynamic_batching`` True is Triton's
    ``dynamic_batching { }`` (batch whatever is queued, do not wait).
    """

    max_batch_size: int
    dynamic_batching: bool = True
    max_queue_delay_microseconds: int = 0
    preferred_batch_size: tuple[int, ...] = ()
    instance_count: int = 1
    instance_kind: Literal["KIND_GPU", "KIND_CPU", "KIND_AUTO"] = "KIND_GPU"
    source: str = ""


@dataclass(frozen=True)
class TensorInfo:
    """One input or output as Triton declares it: dims without the batch axis, -1 = dynamic."""

    name: str
    dtype: torch.dtype
    dims: tuple[int, ...]


@dataclass(frozen=True)
class ZooEntry:
    """A zoo model: its module, default configs and serving settings.

    Helpers take a config and default to the small one (``None``), the one tests can afford.
    """

    name: str
    module: ModuleType
    full: Any
    small: Any
    serving: Serving
    description: str = ""
    input_names: tuple[str, ...] = field(init=False)
    output_names: tuple[str, ...] = field(init=False)
    dynamic_axes: Mapping[str, tuple[int, ...]] = field(init=False)
    output_dynamic_axes: Mapping[str, tuple[int, ...]] = field(init=False)

    def __post_init__(self) -> None:
        mod = self.module
        object.__setattr__(self, "input_names", tuple(mod.INPUT_NAMES))
        object.__setattr__(self, "output_names", tuple(mod.OUTPUT_NAMES))
        object.__setattr__(self, "dynamic_axes", dict(mod.DYNAMIC_AXES))
        object.__setattr__(
            self, "output_dynamic_axes", dict(getattr(mod, "OUTPUT_DYNAMIC_AXES", {}))
        )

    def config(self, size: Size = "small") -> Any:
        if size not in ("full", "small"):
            raise ValueError(f"size must be 'full' or 'small', got {size!r}")
        return self.full if size == "full" else self.small

    def build(
        self, config: Any = None, seed: int = 0, checkpoint: PathLike | None = None
    ) -> torch.nn.Module:
        """``module.build``; ``config`` None means the small config."""
        cfg = self.small if config is None else config
        model: torch.nn.Module = self.module.build(cfg, seed=seed, checkpoint=checkpoint)
        return model

    def example_inputs(
        self, config: Any = None, batch_size: int = 2, seed: int = 0
    ) -> dict[str, torch.Tensor]:
        """``module.example_inputs``; ``config`` None means the small config."""
        cfg = self.small if config is None else config
        inputs: dict[str, torch.Tensor] = self.module.example_inputs(cfg, batch_size, seed)
        return inputs

    def num_parameters(self, config: Any = None) -> int:
        """Parameter count without allocating weights (constructed on the meta device)."""
        cfg = self.small if config is None else config
        with torch.device("meta"):
            model = self.module.construct(cfg)
        return sum(p.numel() for p in model.parameters())

    def io_spec(self, config: Any = None) -> tuple[list[TensorInfo], list[TensorInfo]]:
        """Inputs and outputs with dtypes and dims, from a meta-device forward (no compute)."""
        cfg = self.small if config is None else config
        with torch.device("meta"):
            model = self.module.construct(cfg)
            if getattr(cfg, "fp16", False):
                model = model.half()
        example = self.example_inputs(cfg, batch_size=1)
        outs = model(*[t.to("meta") for t in example.values()])
        outs = outs if isinstance(outs, tuple) else (outs,)

        def info(name: str, t: torch.Tensor, dyn: Mapping[str, tuple[int, ...]]) -> TensorInfo:
            dims = [-1 if axis in dyn.get(name, ()) else n for axis, n in enumerate(t.shape)]
            return TensorInfo(name, t.dtype, tuple(dims[1:]))

        ins = [info(n, t, self.dynamic_axes) for n, t in example.items()]
        return ins, [
            info(n, t, self.output_dynamic_axes)
            for n, t in zip(self.output_names, outs, strict=True)
        ]

    def export_dynamic_shapes(
        self, config: Any = None, max_batch: int | None = None
    ) -> dict[str, dict[int, torch.export.Dim]]:
        """``dynamic_shapes`` for ``torch.onnx.export(..., dynamo=True)``/``torch.export``.

        Export with an example batch of at least 2: the exporter specialises size-1 axes.
        """
        cfg = self.small if config is None else config
        batch = torch.export.Dim(
            "batch", min=1, max=max_batch or max(self.serving.max_batch_size, 2)
        )
        shapes: dict[str, dict[int, torch.export.Dim]] = {}
        extra: dict[int, torch.export.Dim] = {}
        axis_names: Mapping[int, str] = getattr(self.module, "DYNAMIC_AXIS_NAMES", {})
        for name in self.input_names:
            axes: dict[int, torch.export.Dim] = {0: batch}
            for axis in self.dynamic_axes.get(name, ()):
                if axis not in extra:
                    upper = getattr(cfg, "max_position_embeddings", None) or 1 << 16
                    label = axis_names.get(axis, f"axis{axis}")
                    extra[axis] = torch.export.Dim(label, min=1, max=upper)
                axes[axis] = extra[axis]
            shapes[name] = axes
        return shapes


_DLRM_SERVING = Serving(
    # NVIDIA's DLRM example: "we choose 65536 as the optimal batch size" and "the upper bound of the
    # size of the inference batch is set to 65536"; clients send requests of 4096 and dynamic
    # batching packs them. The example gives no queue delay value, only a 20 ms latency budget (8
    # concurrent 4096-requests): the 1 ms here is our choice, well inside that budget. One engine
    # (the deployer's default --triton-engine-count).
    max_batch_size=65536,
    max_queue_delay_microseconds=1000,
    instance_count=1,
    source="NVIDIA's DLRM example: dynamic batching section",
)

_RESNEXT_SERVING = Serving(
    # NVIDIA's ResNeXt example: single-image requests, "the upper bound of the size of the inference
    # batch is set to 64" (deploy example --triton-max-batch-size 64); no delay or engine count
    # given, so the deployer defaults (no queue delay, one instance).
    max_batch_size=64,
    max_queue_delay_microseconds=0,
    instance_count=1,
    source="NVIDIA's ResNeXt example: dynamic batching performance",
)

_BERT_SERVING = Serving(
    # NVIDIA's BERT example: "we recommend using the Dynamic Batcher with max_batch_size = 8 ...
    # and only 1 instance of the engine"; Figure 6 uses preferred_batchsize [4, 8] with
    # max_queue_delay_microseconds 5000 (the other merged version uses 1000 for TensorRT).
    max_batch_size=8,
    max_queue_delay_microseconds=5000,
    preferred_batch_size=(4, 8),
    instance_count=1,
    source="NVIDIA's BERT example: Performance / Batching techniques",
)

_MNIST_SERVING = Serving(
    # the MNIST CPU example: tuned to instance_group { count: 5, kind: KIND_CPU } and
    # dynamic_batching { max_queue_delay_microseconds: 150 }. Its ONNX file had a fixed
    # [1, 1, 28, 28] input, so it set no max_batch_size; our export has a batch axis and 8
    # is the most batch-1 requests its perf_analyzer sweep (concurrency 1..8) can queue.
    max_batch_size=8,
    max_queue_delay_microseconds=150,
    instance_count=5,
    instance_kind="KIND_CPU",
    source="the MNIST ONNX-on-CPU example: instance_group and dynamic_batching tuning",
)

_TEXT_SERVING = Serving(
    # Triton's tutorial: max batch size 8, "dynamic_batching { }" (no delay) and instance_group
    # count 2 on the GPU: the best of its three configurations (4134 infer/s at
    # concurrency 16 with batch-2 requests).
    max_batch_size=8,
    max_queue_delay_microseconds=0,
    instance_count=2,
    source="Triton's tutorial, part 2: dynamic batching + 2 instances",
)

_ENTRIES = (
    ZooEntry(
        "dlrm",
        dlrm,
        dlrm.Config.full(),
        dlrm.Config.small(),
        _DLRM_SERVING,
        "DLRM CTR model, dot interaction, 26 hashed Criteo-like tables",
    ),
    *(
        ZooEntry(
            arch,
            resnext,
            resnext.Config.full(arch),
            resnext.Config.small(arch),
            _RESNEXT_SERVING,
            f"{title}, ImageNet",
        )
        for arch, title in (
            ("resnet50", "ResNet-50 v1.5"),
            ("resnext101-32x4d", "ResNeXt101-32x4d"),
            ("se-resnext101-32x4d", "SE-ResNeXt101-32x4d"),
        )
    ),
    ZooEntry(
        "bert",
        bert,
        bert.Config.full(384),
        bert.Config.small(),
        _BERT_SERVING,
        "BERT-large SQuAD question answering, sequence length 384",
    ),
    ZooEntry(
        "mnist",
        mnist,
        mnist.Config.full(),
        mnist.Config.small(),
        _MNIST_SERVING,
        "MNIST CNN (3 conv + 3 fc) of the MNIST CPU example",
    ),
    ZooEntry(
        "text_recognition",
        text_recognition,
        text_recognition.Config.full(),
        text_recognition.Config.small(),
        _TEXT_SERVING,
        "None-ResNet-None-CTC scene text recogniser, 32x100 grey input",
    ),
)

ZOO: dict[str, ZooEntry] = {entry.name: entry for entry in _ENTRIES}
