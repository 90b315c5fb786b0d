"""config.pbtxt through tritonclient's model_config_pb2 and protobuf text_format, never by hand."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.repository import torch_compat, warmup
from pytest_triton.repository.signature import ServedTensor, Signature
from pytest_triton.repository.spec import DynamicBatching, ModelSpec
from pytest_triton.repository.variants import NATIVE_BACKEND, Variant


def _tensor(cls: type, tensor: ServedTensor) -> object:
    """One input/output; a per-row scalar ([batch] on the wire) is Triton's dims [1] with an
    empty reshape, because Triton rejects empty dims."""
    message = cls(
        name=tensor.name,
        data_type=mc.DataType.Value(tensor.type.config),
        dims=list(tensor.dims) or [1],
    )
    if not tensor.dims:
        message.reshape.SetInParent()
    return message


HOSTED_FORMAT = {
    "onnx": "onnx",
    "onnx-trt": "onnx",
    "torchscript-script": "torchscript",
    "torchscript-trace": "torchscript",
}
"""How hosted_model.py loads each format's artifact (others by the format's own name)."""


def model_config(variant: Variant, signature: Signature) -> mc.ModelConfig:
    """The ModelConfig message Triton reads for one variant."""
    spec: ModelSpec = variant.spec
    sig = signature.with_precision(variant.precision)
    config = mc.ModelConfig(name=variant.model_name, max_batch_size=spec.max_batch_size)
    if variant.hosted:
        config.backend = "python"
        _param(config, "artifact", variant.artifact)
        _param(config, "artifact_format", HOSTED_FORMAT.get(variant.format, variant.format))
        if variant.format == "aoti":  # the loader's name lives in torch_compat alone
            _param(config, "aoti_loader", torch_compat.LOADER)
            _param(config, "aoti_torch", torch_compat.torch_version())  # refused elsewhere
            _param(config, "aoti_device", "cuda" if variant.gpu else "cpu")
        if not variant.artifact.endswith(".onnx"):  # hosted_model.py's DLPack path
            _param(config, "FORCE_CPU_ONLY_INPUT_TENSORS", "no")
    else:
        config.platform = NATIVE_BACKEND[variant.format][1]
    if variant.format == "onnx-trt":
        # ONNX Runtime's TensorRT execution provider, in fp16, as a GPU accelerator.
        accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add()
        accelerator.name = "tensorrt"
        accelerator.parameters["precision_mode"] = "FP16"
        accelerator.parameters["max_workspace_size_bytes"] = str(1 << 30)
    config.input.extend(_tensor(mc.ModelInput, t) for t in sig.inputs)
    config.output.extend(_tensor(mc.ModelOutput, t) for t in sig.outputs)
    set_dynamic_batching(config, spec.dynamic_batching)
    ig = spec.instance_group
    config.instance_group.append(
        mc.ModelInstanceGroup(
            count=ig.count,
            kind=mc.ModelInstanceGroup.Kind.Value(variant.instance_kind),
            gpus=list(ig.gpus),
        )
    )
    for key, value in spec.parameters.items():
        _param(config, key, value)
    config.model_warmup.extend(warmup.messages(variant, signature))
    return config


def set_dynamic_batching(config: mc.ModelConfig, db: DynamicBatching | None) -> None:
    """A spec's (or pipeline's) dynamic_batching block; none without one."""
    if db is not None:
        config.dynamic_batching.CopyFrom(
            mc.ModelDynamicBatching(
                preferred_batch_size=list(db.preferred_batch_size),
                max_queue_delay_microseconds=db.max_queue_delay_microseconds,
                preserve_ordering=db.preserve_ordering,
            )
        )


def _param(config: mc.ModelConfig, key: str, value: str) -> None:
    config.parameters[key].string_value = value


def to_text(config: mc.ModelConfig) -> str:
    return str(text_format.MessageToString(config))


def to_json(config: mc.ModelConfig) -> str:
    """The form Triton's load API takes as a config override."""
    return str(json_format.MessageToJson(config, preserving_proto_field_name=True))


def write_config(directory: Path, config: mc.ModelConfig) -> Path:
    path = directory / "config.pbtxt"
    path.write_text(to_text(config))
    return path


def read_config(path: Path) -> mc.ModelConfig:
    return text_format.Parse(Path(path).read_text(), mc.ModelConfig())


tensor_message = _tensor  # public: the pipeline front models declare their tensors the same way
