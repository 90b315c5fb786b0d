"""INT8 ONNX through onnxruntime.quantization, as the field does it: static QDQ (weights and
activations in int8, activation ranges calibrated on batches of real inputs) for models with
convolutions, dynamic quantization (int8 weights, activation ranges per request) for MLP- and
transformer-style models, whose MatMul/Gemm weights carry the cost.

Calibration batches: the spec's `calibration` (real data, as a CNN needs), else a few of its
generated batches (`make_inputs`: right shapes, not real data; enough for dynamic
quantization, which calibrates nothing).

How each is done is the spec's declaration (`ModelSpec(int8=Int8(...))`, spec.py):
per-channel weight scales, weight MatMuls only, 7-bit weights, operator types, the output
head or named nodes kept in fp32; `quantizer_options` turns it into onnxruntime's arguments."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from pytest_triton.repository.spec import Int8, ModelSpec

GENERATED_BATCHES = 4  # calibration batches made from the spec when it gives none


def calibration_batches(spec: ModelSpec) -> list[dict[str, np.ndarray[Any, Any]]]:
    """The batches static quantization calibrates activation ranges on."""
    if spec.calibration is not None:
        batches = [
            {name: np.asarray(array) for name, array in batch.items()}
            for batch in spec.calibration()
        ]
    else:
        rows = max(spec.max_batch_size, 1)
        batches = [dict(spec.make_inputs(rows, seed)) for seed in range(GENERATED_BATCHES)]
    return [
        {n: (a.astype(np.float32) if a.dtype == np.float64 else a) for n, a in b.items()}
        for b in batches
    ]


def uses_convolutions(model_path: Path) -> bool:
    return any(n.op_type == "Conv" for n in onnx.load(str(model_path)).graph.node)


def head_nodes(model: onnx.ModelProto, count: int) -> list[str]:
    """The names of the last `count` MatMul/Gemm nodes (an ONNX graph lists its nodes in
    topological order): the output head."""
    products = [n.name for n in model.graph.node if n.op_type in ("MatMul", "Gemm")]
    return products[len(products) - count :] if count else []


def quantizer_options(options: Int8, static: bool, head: list[str]) -> dict[str, Any]:
    """The declared `Int8` as keyword arguments of quantize_static / quantize_dynamic; only
    what was declared (the method's own defaults stay the quantizer's). `head`: the names of
    the nodes `fp32_head` keeps in fp32."""
    chosen: dict[str, Any] = {}
    if options.per_channel is not None:
        chosen["per_channel"] = options.per_channel
    if options.reduce_range:
        chosen["reduce_range"] = True
    if options.op_types:
        chosen["op_types_to_quantize"] = list(options.op_types)
    if options.exclude_nodes or head:
        chosen["nodes_to_exclude"] = [*options.exclude_nodes, *head]
    if options.weights_only and not static:
        chosen["extra_options"] = {"MatMulConstBOnly": True}
    return chosen


def quantize(spec: ModelSpec, fp32_path: Path, path: Path) -> str:
    """Write the INT8 model of the fp32 ONNX at `fp32_path` (left as it is) to `path`, as the
    spec's `Int8` declares; returns the method ("static-qdq" or "dynamic")."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The exporter records shapes of initializers in value_info; the quantizer rewrites some
    # of them (a Gemm's weight, transposed) and shape inference then refuses the stale
    # record ("Inferred shape and existing shape differ"). Shapes are inferred anew: the
    # quantizer takes the model without them, in memory.
    model = onnx.load(str(fp32_path))
    del model.graph.value_info[:]
    head = head_nodes(model, spec.int8_options.fp32_head)
    static = any(n.op_type == "Conv" for n in model.graph.node)
    declared = quantizer_options(spec.int8_options, static, head)
    with _without_preprocessing_advice():
        if not static:
            quantize_dynamic(model, str(path), weight_type=QuantType.QInt8, **declared)
            return "dynamic"
        quantize_static_with(spec, model, path, **declared)
    return "static-qdq"


PREPROCESSING_ADVICE = "Please consider to run pre-processing before quantization"


class _PreprocessingAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(PREPROCESSING_ADVICE)


@contextlib.contextmanager
def _without_preprocessing_advice() -> Iterator[None]:
    """onnxruntime.quantization advises pre-processing through the root logger on every
    call: that one message is kept out of the output; the root logger's level, and every
    other record, stay as they are."""
    root, advice = logging.getLogger(), _PreprocessingAdvice()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def quantize_static_with(
    spec: ModelSpec, fp32: Path | onnx.ModelProto, path: Path, **options: Any
) -> None:
    """Static quantization calibrated on the spec's batches; `options` (the spec's declared
    `Int8`, or a comparison's) override the project's choices (QDQ, per-channel int8
    weights, uint8 activations, MinMax ranges), e.g. quant_format=QuantFormat.QOperator or
    reduce_range=True to compare them."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._batches: Iterator[Mapping[str, Any]] = iter(calibration_batches(spec))

        def get_next(self) -> Mapping[str, Any] | None:
            return next(self._batches, None)

    chosen: dict[str, Any] = {
        "quant_format": QuantFormat.QDQ,
        "per_channel": True,
        "activation_type": QuantType.QUInt8,
        "weight_type": QuantType.QInt8,
        "calibrate_method": CalibrationMethod.MinMax,
        **options,
    }
    model = fp32 if isinstance(fp32, onnx.ModelProto) else str(fp32)
    quantize_static(model, str(path), Reader(), **chosen)
