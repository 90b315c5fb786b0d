"""Stateful specs without a server: validation, the sequence_batching config, plans, the
reference stepped from the initial state, and the per-sequence check's messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format
from torch import nn
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton import SpecError
from pytest_triton.models import streaming_gru
from pytest_triton.parity.sequence_parity import SequenceCheck
from pytest_triton.repository import pbtxt
from pytest_triton.repository.sequence import SequenceReference, plan_sequences
from pytest_triton.repository.sequence_config import (
    implicit_state,
    sequence_config,
    write_sequence_model,
)
from tests.helpers.sequence_models import buffer_gru_spec

Control = mc.ModelSequenceBatching.Control


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
def test_config_has_the_sequence_batcher_and_its_control_inputs(strategy: str) -> None:
    spec = streaming_gru.sequence_spec(strategy=strategy)  # type: ignore[arg-type]
    config = sequence_config(spec)
    again = text_format.Parse(pbtxt.to_text(config), mc.ModelConfig())
    assert again == config
    batching = config.sequence_batching
    assert batching.WhichOneof("strategy_choice") == strategy
    if strategy == "oldest":
        assert batching.oldest.max_candidate_sequences == spec.max_candidate_sequences
    kinds = {c.name: (c.control[0].kind, c.control[0].data_type) for c in batching.control_input}
    assert kinds == {
        "START": (Control.CONTROL_SEQUENCE_START, mc.TYPE_INVALID),
        "END": (Control.CONTROL_SEQUENCE_END, mc.TYPE_INVALID),
        "READY": (Control.CONTROL_SEQUENCE_READY, mc.TYPE_INVALID),
        "CORRID": (Control.CONTROL_SEQUENCE_CORRID, mc.TYPE_UINT64),
    }
    assert list(batching.control_input[0].control[0].int32_false_true) == [0, 1]
    assert batching.max_sequence_idle_microseconds == 1_000_000
    assert config.backend == "python" and config.max_batch_size == 16
    assert [(i.name, list(i.dims)) for i in config.input] == [("FRAME", [16])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("SCORES", [8])]


def test_implicit_state_block() -> None:
    zeros = implicit_state(streaming_gru.sequence_spec())
    assert (zeros.input_name, zeros.output_name) == ("STATE_IN", "STATE_OUT")
    assert zeros.data_type == mc.TYPE_FP32 and list(zeros.dims) == [32]
    assert zeros.initial_state[0].zero_data
    ones = implicit_state(streaming_gru.sequence_spec(initial_state=torch.ones(32)))
    assert ones.initial_state[0].data_file == "initial_state.npy"


class NotAStep(nn.Module):
    def forward(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return x


class WrongState(nn.Module):
    def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, state[:, :3]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"module": NotAStep}, r"must return \(y, new_state\), got Tensor"),
        ({"module": WrongState}, r"returned a state of shape \(1, 3\).* initial state is \(32,\)"),
        ({"initial_state": torch.zeros(31)}, r"module\(x, state\) failed on .*\(1, 31\)"),
        ({"strategy": "newest"}, r"strategy 'newest' is not one of direct, oldest"),
        ({"max_batch_size": 0}, r"max_batch_size must be >= 1"),
        ({"name": "a b"}, r"not a valid Triton model directory name"),
    ],
)
def test_a_bad_spec_is_refused_naming_what_and_nothing_is_written(
    overrides: dict[str, object], message: str, tmp_path: Path
) -> None:
    spec = streaming_gru.sequence_spec(**overrides)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=message):
        write_sequence_model(spec, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_model_directory(tmp_path: Path) -> None:
    spec = streaming_gru.sequence_spec(strategy="oldest")
    directory = write_sequence_model(spec, tmp_path)
    assert directory.name == "streaming_gru_oldest"
    assert sorted(p.name for p in (directory / "1").iterdir()) == [
        "initial_state.npy",
        "model.pt",
        "model.py",
    ]
    assert pbtxt.read_config(directory / "config.pbtxt") == sequence_config(spec)


def test_plans_take_ids_from_the_range_and_vary_lengths() -> None:
    spec = streaming_gru.sequence_spec()
    plans = plan_sequences(spec, 16, id_range=(100, 116), length=10, variation=0.2, seed=1)
    assert [p.sequence_id for p in plans] == list(range(100, 116))
    assert all(8 <= p.length <= 12 for p in plans)
    assert len({p.length for p in plans}) > 1
    again = plan_sequences(spec, 16, id_range=(100, 116), length=10, variation=0.2, seed=1)
    for a, b in zip(plans, again, strict=True):
        assert a.sequence_id == b.sequence_id and a.length == b.length
        np.testing.assert_array_equal(np.concatenate(a.inputs), np.concatenate(b.inputs))
    assert all(x.shape == (1, 16) and x.dtype == np.float32 for p in plans for x in p.inputs)
    with pytest.raises(SpecError, match=r"range 1:5 holds 4 ids, fewer than the 8 sequences"):
        plan_sequences(spec, 8, id_range=(1, 5))


def test_the_reference_steps_from_the_initial_state_on_a_fresh_module() -> None:
    spec = streaming_gru.sequence_spec()
    plan = plan_sequences(spec, 1, length=5)[0]
    module = spec.torch_module()
    state = torch.zeros(1, 32)
    by_hand = []
    with torch.inference_mode():
        for x in plan.inputs:
            y, state = module(torch.from_numpy(x), state)
            by_hand.append(y.numpy())
    for a, b in zip(SequenceReference(spec).outputs(plan.inputs), by_hand, strict=True):
        np.testing.assert_array_equal(a, b)
    # a module with a buffer: every sequence's reference starts from the same fresh module
    leaky = SequenceReference(buffer_gru_spec())
    first, second = leaky.outputs(plan.inputs), leaky.outputs(plan.inputs)
    np.testing.assert_array_equal(first[-1], second[-1])


def test_the_check_names_each_sequence_and_its_first_differing_step() -> None:
    expected = {7: [np.zeros((1, 2), np.float32)] * 4, 8: [np.ones((1, 2), np.float32)] * 4}
    check = SequenceCheck("gru", "Y", expected, context=", protocol 'grpc'")
    assert check.check(7, 0, {"Y": np.zeros((1, 2), np.float32)}) is None
    wrong = check.check(7, 2, {"Y": np.full((1, 2), 0.5, np.float32)})
    assert wrong is not None and str(wrong).startswith("wrong answer: sequence 7: step 2 of 4")
    check.check(7, 3, {"Y": np.full((1, 2), 0.5, np.float32)})
    assert check.check(8, 1, {"Y": np.ones((1, 2), np.float32)}, key=8) is None
    assert check.checked == 4 and not check.ok
    assert check.mismatches[7].step == 2
    with pytest.raises(AssertionError, match=r"1 of 2 sequences answered unlike"):
        check.assert_ok()
    assert "sequence 7: step 2 of 4 differs" in check.describe()
    assert "max abs diff 0.5" in check.describe(), check.describe()
