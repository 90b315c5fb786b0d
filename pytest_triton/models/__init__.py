"""Models layer: the zoo of NVIDIA's deployment examples' models in plain PyTorch, with their
serving settings.

Rule: imports only `base` and `repository` (the zoo's specs and committed configs).

Every model module (dlrm, resnext, bert, mnist, text_recognition) offers the same interface:

- ``Config``: a frozen dataclass with ``full()`` and ``small()`` (plus named variants:
  ``resnext.Config.full("se-resnext101-32x4d")``, ``bert.Config.base(128)``...);
- ``build(config, seed=0, checkpoint=None)``: the model in eval mode, initialised from a
  local generator (the global RNG is never touched) or loaded strictly from a checkpoint;
- ``construct(config)``: the same model uninitialised, for the meta device;
- ``example_inputs(config, batch_size, seed=0)``: inputs by name in forward() order;
- ``INPUT_NAMES``, ``OUTPUT_NAMES`` and ``DYNAMIC_AXES`` (input name -> non-batch dynamic
  axes; the batch axis 0 is always dynamic), optionally ``OUTPUT_DYNAMIC_AXES`` and
  ``DYNAMIC_AXIS_NAMES`` (only BERT has a dynamic sequence axis).

``streaming_gru`` is the zoo's stateful model: ``sequence_spec(size, strategy)`` gives the
``SequenceSpec`` of a GRU cell served behind Triton's sequence batcher (docs/sequences.md).

``ZOO`` maps a model name to a ``ZooEntry`` bundling one module and its full/small configs
with recommended Triton settings from the example that describes the model.
"""

from pytest_triton.models import bert, dlrm, mnist, resnext, streaming_gru, text_recognition
from pytest_triton.models._common import CheckpointError, extract_state_dict, load_checkpoint
from pytest_triton.models.specs import zoo_spec
from pytest_triton.models.zoo import ZOO, Serving, Size, TensorInfo, ZooEntry

__all__ = [
    "ZOO",
    "CheckpointError",
    "Serving",
    "Size",
    "TensorInfo",
    "ZooEntry",
    "bert",
    "dlrm",
    "extract_state_dict",
    "load_checkpoint",
    "mnist",
    "resnext",
    "streaming_gru",
    "text_recognition",
    "zoo_spec",
]
