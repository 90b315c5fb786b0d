"""Python-backend model that serves an exported artifact where the server lacks its backend.

Copied into a variant's version directory as model.py. It runs inside Triton's python stub,
so it imports nothing from pytest_triton. Requests handed over together by Triton's dynamic
batcher are concatenated and run as one batch, so batching stays observable and real.

A KIND_GPU instance runs on its GPU or fails to load saying why: never a silent fall back to
the CPU under a test id that claims a GPU.
"""

import json
import os
import sys

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton's stub: the device checks are tested directly
    pb_utils = None


def device_problem(artifact_format, gpu, device_id):
    """Why this environment cannot run the artifact where Triton placed the instance."""
    if not gpu:
        return None
    where = f"KIND_GPU instance on GPU {device_id}, but the stub's Python ({sys.prefix})"
    if artifact_format == "onnx":
        import onnxruntime as ort

        providers = ort.get_available_providers()
        if "CUDAExecutionProvider" not in providers:
            return (f"{where} has onnxruntime {ort.__version__} with {', '.join(providers)} "
                    "only; onnxruntime has no CUDAExecutionProvider: install onnxruntime-gpu")
        return None
    import torch

    if not torch.cuda.is_available():
        return (f"{where} has torch {torch.__version__}, which sees no CUDA device; install "
                "a CUDA build of torch there")
    if device_id >= torch.cuda.device_count():
        return f"{where} sees only {torch.cuda.device_count()} CUDA device(s)"
    return None


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [(o["name"], pb_utils.triton_string_to_numpy(o["data_type"]))
                        for o in config["output"]]
        path = os.path.join(args["model_repository"], args["model_version"], params["artifact"])
        threads = int(params.get("intra_op_threads", "0"))
        gpu = args.get("model_instance_kind") == "GPU"
        device_id = int(args.get("model_instance_device_id", "0"))
        problem = device_problem(params["artifact_format"], gpu, device_id)
        if problem:
            raise RuntimeError(problem)
        if params["artifact_format"] == "onnx":
            self._load_onnx(path, threads, gpu, device_id)
        else:
            self._load_torchscript(path, threads, gpu, device_id)

    def _load_onnx(self, path, threads, gpu, device_id):
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        providers = ["CPUExecutionProvider"]
        if gpu:
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": device_id}))
        session = ort.InferenceSession(path, options, providers=providers)
        if gpu and session.get_providers()[0] != "CUDAExecutionProvider":
            raise RuntimeError(f"onnxruntime's CUDAExecutionProvider failed to start on GPU "
                               f"{device_id} (session providers: {session.get_providers()}); "
                               "see the server log for onnxruntime's reason")
        names = [name for name, _ in self.outputs]
        self._run = lambda feeds: session.run(names, feeds)

    def _load_torchscript(self, path, threads, gpu, device_id):
        import torch

        if threads:
            torch.set_num_threads(threads)
        device = torch.device(f"cuda:{device_id}" if gpu else "cpu")
        module = torch.jit.load(path, map_location=device).eval()

        def run(feeds):
            with torch.inference_mode():
                out = module(*[torch.from_numpy(feeds[n]).to(device) for n in self.inputs])
            if isinstance(out, torch.Tensor):
                out = (out,)
            elif isinstance(out, dict):
                out = tuple(out.values())
            return [o.detach().cpu().numpy() for o in out]

        self._run = run

    def execute(self, requests):
        try:
            feeds_per_request = [
                {n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.inputs}
                for r in requests
            ]
            if self.batched and len(requests) > 1:
                sizes = [f[self.inputs[0]].shape[0] for f in feeds_per_request]
                feeds = {n: np.concatenate([f[n] for f in feeds_per_request]) for n in self.inputs}
                outputs = self._run(feeds)
                bounds = np.cumsum(sizes)[:-1]
                per_request = list(zip(*[np.split(o, bounds) for o in outputs]))
            else:
                per_request = [self._run(f) for f in feeds_per_request]
        except Exception as exc:  # report to every waiting client rather than crash the stub
            error = pb_utils.TritonError(f"{type(exc).__name__}: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        responses = []
        for outs in per_request:
            tensors = [pb_utils.Tensor(name, np.ascontiguousarray(arr).astype(dtype, copy=False))
                       for (name, dtype), arr in zip(self.outputs, outs)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
