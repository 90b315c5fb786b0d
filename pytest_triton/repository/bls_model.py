"""Python-backend BLS model of a pipeline: calls each step's served model in turn through
`pb_utils.InferenceRequest(...).exec()` (or, written with ASYNC = True, `await async_exec()`
inside a coroutine execute, every request of a batch in flight at once).

Copied into the BLS model's version directory as model.py; it runs inside Triton's python stub,
so it imports nothing from pytest_triton. Its config's parameters say the pipeline's name and
its steps (step, served model, input and output tensor names) as JSON. A step that fails
answers that request with an error naming the step and the model that failed.
"""

import asyncio
import json

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton's stub (documentation, import checks)
    pb_utils = None

ASYNC = False  # the repository builder writes True for the "bls-async" mode


class _Pipeline:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.pipeline = params["pipeline"]
        self.steps = json.loads(params["steps"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [
            (o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in config["output"]
        ]

    def _request(self, step, tensors):
        kwargs = {}
        if hasattr(pb_utils, "PreferredMemory"):
            # a step on the GPU answers in host memory: the pipeline's tensors are numpy
            kwargs["preferred_memory"] = pb_utils.PreferredMemory(
                pb_utils.TRITONSERVER_MEMORY_CPU, 0
            )
        return pb_utils.InferenceRequest(
            model_name=step["model"],
            requested_output_names=list(step["outputs"]),
            inputs=[pb_utils.Tensor(n, np.ascontiguousarray(tensors[n])) for n in step["inputs"]],
            **kwargs,
        )

    def _take(self, step, response, tensors):
        """The step's outputs into the pipeline's tensors, or a RuntimeError naming the model."""
        if response.has_error():
            raise RuntimeError(
                f"pipeline {self.pipeline!r} step {step['step']!r}: model "
                f"{step['model']!r} failed: {response.error().message()}"
            )
        for name in step["outputs"]:
            tensor = pb_utils.get_output_tensor_by_name(response, name)
            if tensor is None:
                raise RuntimeError(
                    f"pipeline {self.pipeline!r} step {step['step']!r}: model "
                    f"{step['model']!r} returned no output {name!r}"
                )
            if not tensor.is_cpu():  # a server that ignores the preferred memory
                raise RuntimeError(
                    f"pipeline {self.pipeline!r} step {step['step']!r}: model "
                    f"{step['model']!r} answered {name!r} in GPU memory, which this python "
                    "model reads only from the host"
                )
            tensors[name] = tensor.as_numpy()

    def _inputs(self, request):
        return {n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.inputs}

    def _response(self, tensors):
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor(name, np.ascontiguousarray(tensors[name]).astype(dtype, copy=False))
                for name, dtype in self.outputs
            ]
        )

    def _error(self, exc):
        text = str(exc)
        if not text.startswith(f"pipeline {self.pipeline!r}"):  # not a called model's error
            text = f"pipeline {self.pipeline!r}: {type(exc).__name__}: {exc}"
        return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(text))


class _SyncPipeline(_Pipeline):
    def _answer(self, request):
        tensors = self._inputs(request)
        for step in self.steps:
            self._take(step, self._request(step, tensors).exec(), tensors)
        return self._response(tensors)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._answer(request))
            except Exception as exc:  # one request's failure must not fail the others
                responses.append(self._error(exc))
        return responses


class _AsyncPipeline(_Pipeline):
    async def _answer(self, request):
        try:
            tensors = self._inputs(request)
            for step in self.steps:
                response = await self._request(step, tensors).async_exec()
                self._take(step, response, tensors)
            return self._response(tensors)
        except Exception as exc:  # one request's failure must not fail the others
            return self._error(exc)

    async def execute(self, requests):
        return list(await asyncio.gather(*(self._answer(r) for r in requests)))


TritonPythonModel = _AsyncPipeline if ASYNC else _SyncPipeline
