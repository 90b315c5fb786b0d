"""Decoupled python-backend model serving any causal generator: greedy generation of its
exported TorchScript artifact (stream_greedy.py, copied beside this file, holds the loop the
reference runs too), one response per token through the request's response sender, then the
final flag.

Copied into a stream model's version directory as model.py; it runs inside Triton's python
stub, so it imports nothing from pytest_triton. A bad request gets one error response with the
final flag: the stream ends with a reason and the instance serves the next one. Subclasses (in
tests) override `token` or `finish` to prove that the checks catch a wrong token or a stream
without its final flag.
"""

import importlib.util
import json
import os

import numpy as np
import torch

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton's stub (a syntax check)
    pb_utils = None


def _load_greedy():
    """stream_greedy.py from this model's version directory (not put on sys.path: two
    stream models in one server would share the first one's module)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_greedy.py")
    spec = importlib.util.spec_from_file_location(f"stream_greedy_{id(path)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        torch.set_num_threads(1)  # tiny steps: threads cost more than they give
        path = os.path.join(args["model_repository"], args["model_version"], params["artifact"])
        self.module = torch.jit.load(path).eval()
        self.greedy = _load_greedy()
        self.vocab = int(params["vocab"])
        self.context = int(params["context"]) if params.get("context") else None

    def token(self, position, token):
        """The token sent at `position` (a test's subclass corrupts one)."""
        return token

    def finish(self, sender):
        """Send the final flag (a test's subclass withholds it)."""
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._generate(request, sender)
            except Exception as exc:  # one error response ends this stream, not the model
                error = pb_utils.TritonError(f"{type(exc).__name__}: {exc}")
                sender.send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None

    def _generate(self, request, sender):
        prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy().reshape(-1)
        max_tokens = int(
            pb_utils.get_input_tensor_by_name(request, "MAX_TOKENS").as_numpy().reshape(-1)[0]
        )
        stop = pb_utils.get_input_tensor_by_name(request, "STOP_TOKEN")
        stop_token = int(stop.as_numpy().reshape(-1)[0]) if stop is not None else -1
        problem = self.greedy.problem_of(prompt, max_tokens, self.vocab, self.context)
        if problem:
            raise ValueError(problem)
        tokens = self.greedy.greedy_tokens(self.module, prompt, max_tokens, stop_token, self.vocab)
        for position, token in enumerate(tokens):
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("TOKEN", np.array([self.token(position, token)], np.int64)),
                        pb_utils.Tensor("POSITION", np.array([position], np.int32)),
                    ]
                )
            )
            if request.is_cancelled():
                tokens.close()
                break  # the client went away: stop generating for it
        self.finish(sender)
