"""Python-backend model that serves an exported artifact where the server lacks its backend.

Copied into a variant's version directory as model.py. It runs inside Triton's python stub,
so it imports nothing from pytest_triton. Requests handed over together by Triton's dynamic
batcher are concatenated and run as one batch, so batching stays observable and real.

A KIND_GPU instance runs on its GPU or fails to load saying why: never a silent fall back to
the CPU under a test id that claims a GPU.

TorchScript, torch.export and AOTInductor artifacts take the DLPack path on both devices:
the config says FORCE_CPU_ONLY_INPUT_TENSORS no, so an input that arrives in GPU memory
(CUDA shared memory) stays there; inputs are taken as DLPack tensors, concatenated on the
instance's device, run under torch.inference_mode and handed back as DLPack tensors, with no
host round-trip and, on the CPU, no copy beyond Triton's own.
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


def package_problem(params, torch_version, gpu):
    """Why an AOTInductor package cannot run here: compiled by another torch, or for the
    other device (its kernels are native code for one of them); None when it can."""
    if params.get("artifact_format") != "aoti":
        return None
    built_torch, built_for = params.get("aoti_torch", ""), params.get("aoti_device", "")
    here = "cuda" if gpu else "cpu"
    if built_torch and built_torch != torch_version:
        return (f"the AOTInductor package was compiled by torch {built_torch}, this server's "
                f"Python has torch {torch_version}: export it again with this torch")
    if built_for and built_for != here:
        names = {"cpu": "the CPU", "cuda": "a CUDA GPU"}
        return (f"the AOTInductor package was compiled for {names.get(built_for, built_for)}, "
                f"the instance runs on {names[here]}: export it again for {names[here]}")
    return None


ONNX_SESSION_PARAMETERS = {
    # config parameter -> onnxruntime session config entry (see onnx_session_options)
    "allow_spinning": "session.intra_op.allow_spinning",
}
GRAPH_OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


CPU_SESSION_DEFAULTS = {
    # Idle intra-op threads do not spin on a CPU instance: the stub shares the cores with
    # the server's and the clients' threads, and onnxruntime's spinning workers took them
    # (a CPU-bound instance served several times fewer samples/s with spinning on).
    "allow_spinning": "0",
}


def onnx_session_options(ort, params, threads, gpu=False):
    """The onnxruntime session's options from the config's parameters: intra_op_threads
    (0: onnxruntime's default, one per core), inter_op_threads, execution_mode
    (sequential, parallel), graph_optimization_level (disable, basic, extended, all) and
    allow_spinning (0/1: whether idle intra-op threads spin waiting for work; 0 on a CPU
    instance unless the config says 1, CPU_SESSION_DEFAULTS)."""
    if not gpu:
        params = {**CPU_SESSION_DEFAULTS, **{k: v for k, v in params.items() if v}}
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    if params.get("inter_op_threads"):
        options.inter_op_num_threads = int(params["inter_op_threads"])
    mode = params.get("execution_mode", "").lower()
    if mode:
        if mode not in ("sequential", "parallel"):
            raise RuntimeError(f"execution_mode {mode!r}: use sequential or parallel")
        options.execution_mode = getattr(ort.ExecutionMode, f"ORT_{mode.upper()}")
    level = params.get("graph_optimization_level", "").lower()
    if level:
        if level not in GRAPH_OPTIMIZATION_LEVELS:
            raise RuntimeError(f"graph_optimization_level {level!r}: use "
                               f"{', '.join(GRAPH_OPTIMIZATION_LEVELS)}")
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                                   GRAPH_OPTIMIZATION_LEVELS[level])
    for name, entry in ONNX_SESSION_PARAMETERS.items():
        if params.get(name):
            options.add_session_config_entry(entry, params[name])
    return options


def onnx_session_options_for(params, threads, gpu):
    import onnxruntime as ort

    return onnx_session_options(ort, params, threads, gpu)


def torch_dtype(torch, numpy_dtype):
    """The torch dtype of a config's numpy type (TYPE_FP16 -> torch.float16)."""
    return torch.from_numpy(np.empty(0, dtype=numpy_dtype)).dtype


def dims_for_warmup(dims, batched):
    """A warm-up input's shape: one row, and 1 for each variable dimension."""
    return ([1] if batched else []) + [d if d > 0 else 1 for d in dims]


def load_torch_artifact(torch, params, path, device):
    """A callable for a TorchScript file, a torch.export .pt2 (its ExportedProgram's module)
    or an AOTInductor package (loaded by the function the config names: a private torch name
    that pytest_triton keeps in one place)."""
    artifact_format = params["artifact_format"]
    if artifact_format == "torchscript":
        return torch.jit.load(path, map_location=device).eval()
    if artifact_format == "torch-export":
        return torch.export.load(path).module().to(device)
    if artifact_format == "aoti":
        import importlib

        module_name, _, name = params["aoti_loader"].rpartition(".")
        loader = getattr(importlib.import_module(module_name), name)
        return loader(path)
    raise RuntimeError(f"hosted model.py cannot load artifact format {artifact_format!r}")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.inputs = [i["name"] for i in config["input"]]
        self.input_specs = [  # name, type and the shape the module sees (after a reshape)
            (i["name"], pb_utils.triton_string_to_numpy(i["data_type"]),
             i.get("reshape", {}).get("shape", i.get("dims", [])))
            for i in config["input"]
        ]
        self.outputs = [(o["name"], pb_utils.triton_string_to_numpy(o["data_type"]))
                        for o in config["output"]]
        path = os.path.join(args["model_repository"], args["model_version"], params["artifact"])
        threads = int(params.get("intra_op_threads", "0"))
        gpu = args.get("model_instance_kind") == "GPU"
        device_id = int(args.get("model_instance_device_id", "0"))
        problem = device_problem(params["artifact_format"], gpu, device_id)
        if problem is None and params["artifact_format"] == "aoti":
            import torch

            problem = package_problem(params, torch.__version__, gpu)
        if problem:
            raise RuntimeError(problem)
        self.torch = None  # set for the torch formats: execute takes the DLPack path
        if params["artifact_format"] == "onnx":
            self._load_onnx(path, onnx_session_options_for(params, threads, gpu), gpu,
                            device_id)
        else:
            self._load_torch(params, path, threads, gpu, device_id,
                             int(params.get("torch_warmup_runs", "3")))

    def _load_onnx(self, path, options, gpu, device_id):
        import onnxruntime as ort

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

    def _load_torch(self, params, path, threads, gpu, device_id, warmup_runs):
        import torch
        import torch.utils.dlpack

        if threads:
            torch.set_num_threads(threads)
        # The reference's settings (PyTorch's defaults): cuDNN on, no autotuning, so the
        # served kernels are the ones the reference and an in-process run choose. TF32 is
        # the server's numerics (NVIDIA_TF32_OVERRIDE=0 in its environment when strict).
        torch.backends.cudnn.enabled = True
        torch.backends.cudnn.benchmark = False
        self.torch = torch
        self.device = torch.device(f"cuda:{device_id}" if gpu else "cpu")
        if gpu:
            torch.cuda.set_device(self.device)
        self.module = load_torch_artifact(torch, params, path, self.device)
        self.out_dtypes = [torch_dtype(torch, dtype) for _, dtype in self.outputs]
        self._warm(warmup_runs)

    def _warm(self, runs):
        """TorchScript's profiling executor optimizes a module after its first runs: run them
        here, so the first requests (and their timing) meet the module as it will serve.
        A module that cannot run on zeros of one row is left cold (Triton's model_warmup,
        with real samples, still runs)."""
        torch = self.torch
        try:
            feeds = [torch.zeros(dims_for_warmup(dims, self.batched),
                                 dtype=torch_dtype(torch, dtype), device=self.device)
                     for _, dtype, dims in self.input_specs]
            for _ in range(runs):
                self._torch_run(feeds)
        except Exception as exc:  # noqa: BLE001 - a cold module still serves
            logger = getattr(pb_utils, "Logger", None)
            if logger is not None:
                logger.log_warn(f"warm-up skipped: {exc}")

    def _torch_run(self, feeds):
        """The module on device tensors; outputs at the config's types, contiguous."""
        torch = self.torch
        with torch.inference_mode():
            out = self.module(*feeds)
            if isinstance(out, torch.Tensor):
                out = (out,)
            elif isinstance(out, dict):
                out = tuple(out.values())
            return [o.to(dtype).contiguous() for o, dtype in zip(out, self.out_dtypes)]

    def _torch_input(self, tensor):
        """A request's input as a torch tensor on this instance's device: a DLPack view of
        Triton's buffer (GPU or CPU), copied only when it sits on another device."""
        torch = self.torch
        if tensor.is_cpu() and tensor.as_numpy().dtype == np.bool_:
            data = torch.from_numpy(tensor.as_numpy().copy())  # DLPack has no bool for all
        else:
            data = torch.utils.dlpack.from_dlpack(tensor.to_dlpack())
        return data.to(self.device)

    def _torch_output(self, name, data):
        torch = self.torch
        if data.dtype == torch.bool:
            return pb_utils.Tensor(name, data.cpu().numpy())
        return pb_utils.Tensor.from_dlpack(name, torch.utils.dlpack.to_dlpack(data))

    def _execute_torch(self, requests):
        """Inputs stay on the device from the request to the response."""
        torch = self.torch
        feeds = [[self._torch_input(pb_utils.get_input_tensor_by_name(r, n))
                  for n in self.inputs] for r in requests]
        if self.batched and len(requests) > 1:
            sizes = [f[0].shape[0] for f in feeds]
            batch = [torch.cat(column) for column in zip(*feeds)]
            per_request = list(zip(*[torch.split(o, sizes) for o in self._torch_run(batch)]))
        else:
            per_request = [self._torch_run(f) for f in feeds]
        if self.device.type == "cuda":  # Triton reads the outputs on a stream of its own
            torch.cuda.current_stream(self.device).synchronize()
        return [[self._torch_output(name, t.contiguous())
                 for (name, _), t in zip(self.outputs, outs)] for outs in per_request]

    def _execute_numpy(self, requests):
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
        return [[pb_utils.Tensor(name, np.ascontiguousarray(arr).astype(dtype, copy=False))
                 for (name, dtype), arr in zip(self.outputs, outs)] for outs in per_request]

    def execute(self, requests):
        try:
            if self.torch is not None:
                tensors = self._execute_torch(requests)
            else:
                tensors = self._execute_numpy(requests)
        except Exception as exc:  # report to every waiting client rather than crash the stub
            error = pb_utils.TritonError(f"{type(exc).__name__}: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        return [pb_utils.InferenceResponse(output_tensors=t) for t in tensors]
