"""Hand-made python-backend model directories for launcher tests (built with model_config_pb2)."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.repository import pbtxt

Tensor = tuple[str, int, list[int]]  # name, model_config_pb2 data type, dims


def write_python_directory(
    root: Path,
    name: str,
    source: str,
    inputs: list[Tensor],
    outputs: list[Tensor],
    max_batch_size: int = 8,
    cpu_instances: int | None = None,
) -> Path:
    """root/name/1/model.py and root/name/config.pbtxt for the python backend (Triton's
    default instance group unless `cpu_instances` says how many)."""
    directory = root / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "1" / "model.py").write_text(source)
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=max_batch_size)
    config.input.extend(mc.ModelInput(name=n, data_type=t, dims=d) for n, t, d in inputs)
    config.output.extend(mc.ModelOutput(name=n, data_type=t, dims=d) for n, t, d in outputs)
    if cpu_instances is not None:
        config.instance_group.append(
            mc.ModelInstanceGroup(count=cpu_instances, kind=mc.ModelInstanceGroup.KIND_CPU)
        )
    pbtxt.write_config(directory, config)
    return directory


ADD_ONE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        {initialize}

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]) for r in requests]
"""


def write_python_model(
    root: Path, name: str, *, initialize: str = "pass", max_batch_size: int = 8
) -> Path:
    """A model computing Y = X + 1; `initialize` is the body of initialize() (e.g. a raise)."""
    return write_python_directory(
        root,
        name,
        ADD_ONE.replace("{initialize}", initialize),
        [("X", mc.TYPE_FP32, [4])],
        [("Y", mc.TYPE_FP32, [4])],
        max_batch_size,
    )


ECHO_BYTES = """
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
"""

SLEEP_S = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({seconds})
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]) for r in requests]
"""


def write_bytes_model(root: Path, name: str = "echo_bytes") -> Path:
    """BYTES in, BYTES out: each element upper-cased (TYPE_STRING in config.pbtxt)."""
    return write_python_directory(
        root, name, ECHO_BYTES, [("TEXT", mc.TYPE_STRING, [-1])], [("UPPER", mc.TYPE_STRING, [-1])]
    )


def write_slow_model(root: Path, name: str = "slow", seconds: float = 3.0) -> Path:
    """Y = X after `seconds` of sleep: longer than a short client timeout."""
    return write_python_directory(
        root,
        name,
        SLEEP_S.replace("{seconds}", str(seconds)),
        [("X", mc.TYPE_FP32, [4])],
        [("Y", mc.TYPE_FP32, [4])],
    )


SUM_TWO = """
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
"""

IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "W", pb_utils.get_input_tensor_by_name(r, "V").as_numpy())]) for r in requests]
"""


def write_two_input_model(root: Path, name: str = "sum_two") -> Path:
    """S = A + sum(B) per row: A FP32 [4], B INT32 [2] (for missing and extra inputs)."""
    return write_python_directory(
        root,
        name,
        SUM_TWO,
        [("A", mc.TYPE_FP32, [4]), ("B", mc.TYPE_INT32, [2])],
        [("S", mc.TYPE_FP32, [4])],
    )


def write_variable_length_model(root: Path, name: str = "identity_var") -> Path:
    """W = V, FP32 of any length per row (dims [-1]): a shape can claim any size."""
    return write_python_directory(
        root, name, IDENTITY, [("V", mc.TYPE_FP32, [-1])], [("W", mc.TYPE_FP32, [-1])]
    )


MIXED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            h = pb_utils.get_input_tensor_by_name(r, "H").as_numpy()
            i = pb_utils.get_input_tensor_by_name(r, "I").as_numpy()
            t = pb_utils.get_input_tensor_by_name(r, "T").as_numpy()
            upper = np.array([x.upper() for x in t.ravel()], dtype=object).reshape(t.shape)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("H2", (h * 2).astype(np.float16)),
                pb_utils.Tensor("I2", (i + 1).astype(np.int64)),
                pb_utils.Tensor("U", upper),
                pb_utils.Tensor("S", h.astype(np.float32).sum(axis=1, keepdims=True)),
            ]))
        return responses
"""


def write_mixed_model(root: Path, name: str = "mixed") -> Path:
    """Several datatypes in and four outputs out: H FP16 [3] -> H2 = 2H (FP16) and
    S = sum(H) (FP32 [1]); I INT64 [2] -> I2 = I + 1; T BYTES [-1] -> U upper-cased."""
    return write_python_directory(
        root,
        name,
        MIXED,
        [("H", mc.TYPE_FP16, [3]), ("I", mc.TYPE_INT64, [2]), ("T", mc.TYPE_STRING, [-1])],
        [
            ("H2", mc.TYPE_FP16, [3]),
            ("I2", mc.TYPE_INT64, [2]),
            ("U", mc.TYPE_STRING, [-1]),
            ("S", mc.TYPE_FP32, [1]),
        ],
    )
