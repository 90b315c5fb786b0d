"""INT8 quantization leaves the process and its input as they were: the root logger's level
(other code's warnings still reach the user) and the fp32 ONNX file it reads."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import onnx
import torch

from pytest_triton import ModelSpec
from pytest_triton.repository.exporters import export_onnx
from pytest_triton.repository.quantization import quantize
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.signature import resolve_signature


class TinyConv(torch.nn.Module):
    """A convolution: the static (calibrated) path."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).relu().flatten(1)


def test_quantization_keeps_the_root_logger_and_its_input_file(tmp_path: Path) -> None:
    root = logging.getLogger()
    seen: list[int] = []

    def calibration() -> list[dict[str, Any]]:  # called while the quantizer runs
        seen.append(root.getEffectiveLevel())
        return [{"x": torch.randn(2, 1, 6, 6).numpy()}]

    spec = ModelSpec(
        name="tiny_conv",
        module=TinyConv,
        example_inputs={"x": torch.randn(2, 1, 6, 6)},
        inputs=["x"],
        outputs=["y"],
        max_batch_size=4,
        calibration=calibration,
    )
    fp32 = tmp_path / "model.onnx"
    export_onnx(spec, NativeModel(spec, "fp32"), fp32, resolve_signature(spec))
    before = fp32.read_bytes()
    assert onnx.load(str(fp32)).graph.value_info, "the export records shapes the quantizer drops"
    level = root.level
    assert quantize(spec, fp32, tmp_path / "int8.onnx") == "static-qdq"
    assert seen == [root.getEffectiveLevel()] and root.level == level
    assert fp32.read_bytes() == before, "the fp32 input was rewritten"
    assert not root.filters
