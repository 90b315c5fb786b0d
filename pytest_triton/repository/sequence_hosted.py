"""Python-backend model that serves a stateful TorchScript step behind the sequence batcher.

Copied into a stateful model's version directory as model.py; it runs inside Triton's python
stub and imports nothing from pytest_triton. The python backend of Triton 2.51 does not carry
implicit state (see sequence_config.py), so this model keeps each sequence's state itself:
keyed by the CORRID control input, set to the initial state on START, dropped after END. The
sequence batcher still decides which requests run together (direct slots or oldest-first
batches); the requests of one execute() run as one batch, one row per sequence.
"""

import json
import os
from typing import Any

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton's stub
    pb_utils = None


def _flag(request: Any, name: str) -> bool:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return tensor is not None and bool(tensor.as_numpy().ravel()[0])


def _corrid(request: Any) -> int:
    tensor = pb_utils.get_input_tensor_by_name(request, "CORRID")
    if tensor is not None:
        return int(tensor.as_numpy().ravel()[0])
    return int(request.correlation_id())


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        import torch

        torch.set_num_threads(1)
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        version = os.path.join(args["model_repository"], args["model_version"])
        self.torch = torch
        self.module = torch.jit.load(os.path.join(version, params["artifact"])).eval()
        self.initial = torch.from_numpy(np.load(os.path.join(version, params["initial_state"])))
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.states: dict[int, Any] = {}

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        rows, states, inputs = [], [], []
        for i, request in enumerate(requests):
            if not _flag(request, "READY"):  # an empty slot of a direct batch: no sequence
                responses[i] = pb_utils.InferenceResponse(output_tensors=[])
                continue
            key = _corrid(request)
            if _flag(request, "START"):
                self.states[key] = self.initial[None].clone()
            if key not in self.states:
                error = pb_utils.TritonError(
                    f"sequence {key}: no state (its first request had no START, or the "
                    "sequence timed out in the batcher)"
                )
                responses[i] = pb_utils.InferenceResponse(output_tensors=[], error=error)
                continue
            x = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            rows.append((i, key, _flag(request, "END")))
            states.append(self.states[key])
            inputs.append(self.torch.from_numpy(np.array(x)))
        if rows:
            try:
                with self.torch.inference_mode():
                    y, new = self.module(self.torch.cat(inputs), self.torch.cat(states))
            except Exception as exc:  # every waiting client hears why, the stub lives on
                error = pb_utils.TritonError(f"{type(exc).__name__}: {exc}")
                for i, _, _ in rows:
                    responses[i] = pb_utils.InferenceResponse(output_tensors=[], error=error)
                return responses
            for row, (i, key, end) in enumerate(rows):
                if end:
                    self.states.pop(key, None)
                else:
                    self.states[key] = new[row : row + 1].clone()
                out = np.ascontiguousarray(y[row : row + 1].detach().cpu().numpy())
                responses[i] = pb_utils.InferenceResponse([pb_utils.Tensor(self.output_name, out)])
        return responses
