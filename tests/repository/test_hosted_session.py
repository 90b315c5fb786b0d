"""The onnxruntime session options a hosted ONNX variant runs with, read from its config's
parameters by hosted_model.py (which runs inside Triton's python stub: tested directly here,
with this machine's real onnxruntime)."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from pytest_triton.repository import hosted_model


def test_session_options_come_from_the_config_parameters() -> None:
    params = {
        "inter_op_threads": "1",
        "execution_mode": "sequential",
        "graph_optimization_level": "extended",
        "allow_spinning": "0",
    }
    options = hosted_model.onnx_session_options(ort, params, 1)
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    # a CPU instance's idle threads do not spin unless the config says so; a GPU's keep
    # onnxruntime's default
    spinning = "session.intra_op.allow_spinning"
    assert hosted_model.onnx_session_options(ort, {}, 0).get_session_config_entry(spinning) == "0"
    kept = hosted_model.onnx_session_options(ort, {"allow_spinning": "1"}, 0)
    assert kept.get_session_config_entry(spinning) == "1"
    gpu = hosted_model.onnx_session_options(ort, {}, 0, gpu=True)
    with pytest.raises(RuntimeError, match="allow_spinning"):  # not set: onnxruntime's own
        gpu.get_session_config_entry(spinning)
    with pytest.raises(RuntimeError, match="execution_mode 'fast': use sequential or parallel"):
        hosted_model.onnx_session_options(ort, {"execution_mode": "fast"}, 0)
    with pytest.raises(RuntimeError, match="graph_optimization_level 'max': use disable"):
        hosted_model.onnx_session_options(ort, {"graph_optimization_level": "max"}, 0)
