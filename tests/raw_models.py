"""Hand-made python-backend model directories for launcher tests (built with model_config_pb2)."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.repository import pbtxt

ADD_ONE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        {initialize}

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]) for r in requests]
'''


def write_python_model(root: Path, name: str, *, initialize: str = "pass",
                       max_batch_size: int = 8) -> Path:
    """A model computing Y = X + 1; `initialize` is the body of initialize() (e.g. a raise)."""
    directory = root / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "1" / "model.py").write_text(ADD_ONE.replace("{initialize}", initialize))
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=max_batch_size)
    config.input.append(mc.ModelInput(name="X", data_type=mc.TYPE_FP32, dims=[4]))
    config.output.append(mc.ModelOutput(name="Y", data_type=mc.TYPE_FP32, dims=[4]))
    pbtxt.write_config(directory, config)
    return directory


ECHO_BYTES = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()
            upper = np.array([t.upper() for t in text.ravel()], dtype=object)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("UPPER", upper.reshape(text.shape))]))
        return responses
'''

SLEEP_S = '''
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({seconds})
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
'''


def write_bytes_model(root: Path, name: str = "echo_bytes") -> Path:
    """BYTES in, BYTES out: each element upper-cased (TYPE_STRING in config.pbtxt)."""
    directory = root / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "1" / "model.py").write_text(ECHO_BYTES)
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=8)
    config.input.append(mc.ModelInput(name="TEXT", data_type=mc.TYPE_STRING, dims=[-1]))
    config.output.append(mc.ModelOutput(name="UPPER", data_type=mc.TYPE_STRING, dims=[-1]))
    pbtxt.write_config(directory, config)
    return directory


def write_slow_model(root: Path, name: str = "slow", seconds: float = 3.0) -> Path:
    """Y = X after `seconds` of sleep: longer than a short client timeout."""
    directory = root / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "1" / "model.py").write_text(SLEEP_S.replace("{seconds}", str(seconds)))
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=8)
    config.input.append(mc.ModelInput(name="X", data_type=mc.TYPE_FP32, dims=[4]))
    config.output.append(mc.ModelOutput(name="Y", data_type=mc.TYPE_FP32, dims=[4]))
    pbtxt.write_config(directory, config)
    return directory


SUM_TWO = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "B").as_numpy()
            s = a + b.astype(np.float32).sum(axis=1, keepdims=True)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("S", s)]))
        return responses
'''

IDENTITY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "W", pb_utils.get_input_tensor_by_name(r, "V").as_numpy())]) for r in requests]
'''


def write_two_input_model(root: Path, name: str = "sum_two") -> Path:
    """S = A + sum(B) per row: A FP32 [4], B INT32 [2] (for missing and extra inputs)."""
    directory = root / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "1" / "model.py").write_text(SUM_TWO)
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=8)
    config.input.append(mc.ModelInput(name="A", data_type=mc.TYPE_FP32, dims=[4]))
    config.input.append(mc.ModelInput(name="B", data_type=mc.TYPE_INT32, dims=[2]))
    config.output.append(mc.ModelOutput(name="S", data_type=mc.TYPE_FP32, dims=[4]))
    pbtxt.write_config(directory, config)
    return directory


def write_variable_length_model(root: Path, name: str = "identity_var") -> Path:
    """W = V, FP32 of any length per row (dims [-1]): a shape can claim any size."""
    directory = root / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "1" / "model.py").write_text(IDENTITY)
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=8)
    config.input.append(mc.ModelInput(name="V", data_type=mc.TYPE_FP32, dims=[-1]))
    config.output.append(mc.ModelOutput(name="W", data_type=mc.TYPE_FP32, dims=[-1]))
    pbtxt.write_config(directory, config)
    return directory
