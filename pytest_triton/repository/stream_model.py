"""Decoupled python-backend model: greedy generation of an exported TorchScript generator, one
response per token through the request's response sender, then the final flag.

Copied into a stream model's version directory as model.py; it runs inside Triton's python
stub, so it imports nothing from pytest_triton (stream.py's check_prompt says the same words).
A bad request gets one error response with the final flag: the stream ends with a reason and
the instance serves the next one. Subclasses (in tests) override `token` or `finish` to prove
that the checks catch a wrong token or a stream without its final flag.
"""

import json
import os

import numpy as np
import torch

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton's stub (a syntax check)
    pb_utils = None


def problem_of(prompt, max_tokens, vocab, context):
    if len(prompt) == 0:
        return "the prompt is empty: send at least one token"
    if len(prompt) > context:
        return (
            f"the prompt has {len(prompt)} tokens, longer than the model's context of "
            f"{context}: shorten it to at most {context}"
        )
    bad = [int(t) for t in prompt if not 0 <= int(t) < vocab]
    if bad:
        return f"prompt token {bad[0]} is outside the vocabulary [0, {vocab})"
    if max_tokens < 1:
        return f"MAX_TOKENS is {max_tokens}: ask for at least one token"
    if len(prompt) + max_tokens - 1 > context:
        return (
            f"{len(prompt)} prompt tokens + {max_tokens} new tokens need "
            f"{len(prompt) + max_tokens - 1} positions, more than the model's context of "
            f"{context}: ask for at most {context - len(prompt) + 1} new tokens"
        )
    return None


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        torch.set_num_threads(1)  # tiny steps: threads cost more than they give
        path = os.path.join(args["model_repository"], args["model_version"], params["artifact"])
        self.module = torch.jit.load(path).eval()
        self.vocab = int(params["vocab"])
        self.context = int(params["context"])
        self.layers = self.module.gru.num_layers
        self.hidden = self.module.gru.hidden_size

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
        problem = problem_of(prompt, max_tokens, self.vocab, self.context)
        if problem:
            raise ValueError(problem)
        with torch.inference_mode():
            state = torch.zeros(self.layers, 1, self.hidden)
            feed = torch.from_numpy(prompt.astype(np.int64)).reshape(1, -1)
            start = torch.tensor(0)
            for position in range(max_tokens):
                if request.is_cancelled():
                    break  # the client went away: stop generating for it
                logits, state = self.module(feed, start, state)
                token = int(torch.argmax(logits[0]))
                sender.send(
                    pb_utils.InferenceResponse(
                        output_tensors=[
                            pb_utils.Tensor(
                                "TOKEN", np.array([self.token(position, token)], np.int64)
                            ),
                            pb_utils.Tensor("POSITION", np.array([position], np.int32)),
                        ]
                    )
                )
                if token == stop_token:
                    break
                start = start + feed.shape[1]
                feed = torch.tensor([[token]], dtype=torch.int64)
        self.finish(sender)
