"""Zoo models as ModelSpecs, with the examples' serving settings (the committed configs' source)."""

from __future__ import annotations

from typing import Any

from pytest_triton.models.zoo import ZOO, Size
from pytest_triton.repository.spec import DynamicBatching, InstanceGroup, InstanceKind, ModelSpec


def zoo_spec(
    name: str,
    size: Size = "small",
    *,
    seed: int = 0,
    config: Any = None,
    checkpoint: str | None = None,
    example_batch: int = 4,
    instance_count: int | None = None,
    instance_kind: InstanceKind | None = None,
    model_name: str | None = None,
    **overrides: Any,
) -> ModelSpec:
    """A ModelSpec of zoo model `name` at `size` (or an explicit `config`).

    Serving settings come from the zoo entry (the examples' recommendations); `instance_count`
    overrides them because a 2-core CPU cannot host the GPU counts; `instance_kind` None runs
    the instances on the server's device (KIND_GPU with --triton-gpu, where the reference then
    runs on CUDA too). Any other ModelSpec field can be overridden by keyword.
    """
    if name not in ZOO:
        raise KeyError(f"no zoo model {name!r}; choose from {', '.join(ZOO)}")
    entry = ZOO[name]
    cfg = config if config is not None else entry.config(size)
    serving = entry.serving
    batching = None
    if serving.dynamic_batching:
        batching = DynamicBatching(
            serving.max_queue_delay_microseconds, tuple(serving.preferred_batch_size)
        )
    fields: dict[str, Any] = dict(
        name=model_name or name,
        module=lambda: entry.build(cfg, seed=seed, checkpoint=checkpoint),
        example_inputs=entry.example_inputs(cfg, batch_size=example_batch, seed=seed),
        inputs=list(entry.input_names),
        outputs=list(entry.output_names),
        max_batch_size=serving.max_batch_size,
        dynamic_axes={k: list(v) for k, v in entry.dynamic_axes.items()},
        dynamic_batching=batching,
        instance_group=InstanceGroup(instance_count or serving.instance_count, instance_kind),
        input_factory=lambda batch, s: entry.example_inputs(cfg, batch_size=batch, seed=s),
    )
    fields.update(overrides)
    return ModelSpec(**fields)
