"""A stateful model's directory: the TorchScript step, the python-hosted model.py that carries
its state, and a config.pbtxt with `sequence_batching` (through model_config_pb2).

Where the state lives. Triton's implicit state (`sequence_batching { state { ... } }`) keeps a
sequence's state in the server between requests, but only backends that call Triton's state
API carry it (onnxruntime, TensorRT, libtorch); the python backend of the bundled server
(Triton 2.51) hands the model the initial state on every request and never stores the state
it returns, measured in tests/repository/test_sequences.py. The bundled CPU server has only
the python backend, so its hosted model keeps each sequence's state itself, keyed by the
CORRID control input, reset on START and dropped on END. `implicit_state()` writes the state
block for servers whose backend carries it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.dtypes import tensor_type
from pytest_triton.base.errors import ExportError
from pytest_triton.repository import pbtxt, torchscript_notice
from pytest_triton.repository.sequence import SequenceSpec

HOSTED_SEQUENCE_MODEL = Path(__file__).with_name("sequence_hosted.py")
ARTIFACT = "model.pt"
INITIAL_STATE = "initial_state.npy"
CONTROLS = {
    "START": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START,
    "END": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_END,
    "READY": mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY,
}
CORRID = "CORRID"


def _data_type(dtype: object) -> int:
    return int(mc.DataType.Value(tensor_type(dtype).config))


def sequence_batching(spec: SequenceSpec) -> mc.ModelSequenceBatching:
    """The sequence batcher: its strategy, idle timeout and the control inputs START, END,
    READY (INT32 0/1) and CORRID (UINT64, the sequence id)."""
    batching = mc.ModelSequenceBatching(
        max_sequence_idle_microseconds=spec.max_sequence_idle_microseconds
    )
    if spec.strategy == "direct":
        batching.direct.SetInParent()
    else:
        batching.oldest.max_candidate_sequences = spec.max_candidate_sequences
        batching.oldest.max_queue_delay_microseconds = spec.max_queue_delay_microseconds
        batching.oldest.preferred_batch_size.append(spec.max_batch_size)
    for name, kind in CONTROLS.items():
        batching.control_input.append(
            mc.ModelSequenceBatching.ControlInput(
                name=name,
                control=[mc.ModelSequenceBatching.Control(kind=kind, int32_false_true=[0, 1])],
            )
        )
    batching.control_input.append(
        mc.ModelSequenceBatching.ControlInput(
            name=CORRID,
            control=[
                mc.ModelSequenceBatching.Control(
                    kind=mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID,
                    data_type=mc.TYPE_UINT64,
                )
            ],
        )
    )
    return batching


def implicit_state(
    spec: SequenceSpec, input_name: str = "STATE_IN", output_name: str = "STATE_OUT"
) -> mc.ModelSequenceBatching.State:
    """Triton's implicit state for the spec: the state output of request i is the state input
    of request i+1, zeros (or the spec's initial state, when non-zero) before the first."""
    state = mc.ModelSequenceBatching.State(
        input_name=input_name,
        output_name=output_name,
        data_type=_data_type(spec.initial_state.dtype),
        dims=list(spec.initial_state.shape),
    )
    initial = mc.ModelSequenceBatching.InitialState(
        name="initial",
        data_type=state.data_type,
        dims=list(spec.initial_state.shape),
    )
    if torch.count_nonzero(spec.initial_state).item() == 0:
        initial.zero_data = True
    else:
        initial.data_file = INITIAL_STATE  # read from the model's initial_state/ directory
    state.initial_state.append(initial)
    return state


def sequence_config(spec: SequenceSpec) -> mc.ModelConfig:
    """The python-hosted stateful model's config (its state kept by the model, by CORRID)."""
    config = mc.ModelConfig(
        name=spec.model_name, backend="python", max_batch_size=spec.max_batch_size
    )
    config.input.append(
        mc.ModelInput(
            name=spec.input_name,
            data_type=_data_type(spec.example_input.dtype),
            dims=list(spec.example_input.shape) or [1],
        )
    )
    y, _ = spec.step(spec.example_input[None], spec.initial_state[None])
    config.output.append(
        mc.ModelOutput(
            name=spec.output_name, data_type=_data_type(y.dtype), dims=list(y.shape[1:]) or [1]
        )
    )
    config.sequence_batching.CopyFrom(sequence_batching(spec))
    config.instance_group.append(
        mc.ModelInstanceGroup(count=spec.instance_count, kind=mc.ModelInstanceGroup.KIND_CPU)
    )
    config.parameters["artifact"].string_value = ARTIFACT
    config.parameters["initial_state"].string_value = INITIAL_STATE
    return config


def export_step(spec: SequenceSpec, path: Path) -> None:
    """TorchScript of the module's step; a failure names the spec and the exporter."""
    module = spec.torch_module()
    try:
        with torchscript_notice.torchscript_calls():  # a TracerWarning reaches the user
            if spec.fmt == "torchscript-script":
                exported = torch.jit.script(module)
            else:
                example = (spec.example_input[None], spec.initial_state[None])
                exported = torch.jit.trace(module, example, check_trace=False)
            torch.jit.save(exported, str(path))
    except Exception as exc:  # TorchScript raises many kinds; name the spec and the format
        raise ExportError(
            f"exporting sequence model {spec.name!r} as {spec.fmt} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def write_sequence_model(spec: SequenceSpec, root: Path) -> Path:
    """root/<model>/config.pbtxt and root/<model>/1/{model.py, model.pt, initial_state.npy};
    the spec is validated before anything is written."""
    spec.validate()
    directory = Path(root) / spec.model_name
    version = directory / "1"
    version.mkdir(parents=True, exist_ok=True)
    export_step(spec, version / ARTIFACT)
    np.save(version / INITIAL_STATE, spec.initial_state.detach().cpu().numpy())
    shutil.copyfile(HOSTED_SEQUENCE_MODEL, version / "model.py")
    pbtxt.write_config(directory, sequence_config(spec))
    return directory


def model_files(directory: Path) -> dict[str, bytes]:
    """The version directory as Triton's load API takes it, for a server that does not read
    our repository (file:1/model.py, ...)."""
    return {
        f"file:{p.relative_to(directory).as_posix()}": p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != "config.pbtxt"
    }
