"""The format names settings accept: PyTorch 2's formats are asked for, never defaults."""

from __future__ import annotations

import pytest

from pytest_triton.base.formats import CPU_FORMATS, FORMATS, PT2_FORMATS
from pytest_triton.base.setting_parsers import parse_format, parse_formats


def test_pt2_formats_are_named_but_not_served_unless_asked() -> None:
    assert parse_formats("onnx, torch-export,aoti") == ("onnx", "torch-export", "aoti")
    assert parse_format("aoti") == "aoti" and parse_format("torch-export") == "torch-export"
    assert not set(PT2_FORMATS) & set(FORMATS), "an AOTInductor compile a zoo model is too dear"
    assert set(CPU_FORMATS) == set(FORMATS) | set(PT2_FORMATS)


def test_an_unknown_format_lists_the_pt2_ones() -> None:
    with pytest.raises(ValueError, match=r"choose from .*torch-export, aoti"):
        parse_formats("pt2")
    with pytest.raises(ValueError, match=r"cannot be served on CPU; choose from .*aoti"):
        parse_format("tensorrt")
