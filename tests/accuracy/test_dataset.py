"""A batch is its inputs or `(inputs, labels)`; inputs are a dict by input name, or one array
for a one-input model. Arrays in a tuple are never taken for several inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_triton import DatasetError
from pytest_triton.accuracy.dataset import read_batches

X = np.zeros((4, 3), dtype=np.float32)
IDX = np.arange(4, dtype=np.int64)
Y = np.array([0, 1, 0, 1])


def test_a_one_input_models_pairs_are_inputs_and_labels() -> None:
    """The docs' MLP batches, as a tuple and as a DataLoader's list of tensors."""
    for batch in ((X, Y), [torch.from_numpy(X), torch.from_numpy(Y)]):
        (read,) = read_batches([batch], ["x"])
        np.testing.assert_array_equal(read.inputs["x"], X)
        assert read.labels is not None
        np.testing.assert_array_equal(read.labels, Y)
    (bare,) = read_batches([X], ["x"])
    assert bare.labels is None and bare.rows == 4


def test_several_inputs_are_a_dict_with_or_without_labels() -> None:
    given = {"x": X, "idx": IDX}
    (alone,) = read_batches([given], ["x", "idx"])
    (labelled,) = read_batches([(given, Y)], ["x", "idx"])
    assert alone.labels is None and sorted(labelled.inputs) == ["idx", "x"]
    assert labelled.labels is not None


def test_a_two_input_models_pair_of_arrays_is_refused_by_name() -> None:
    """(x, idx) for a model of two inputs reads as (inputs, labels): refused, pointing at the
    dict form, instead of scoring idx as labels."""
    with pytest.raises(
        DatasetError, match=r"one array but the model has inputs \['x', 'idx'\].*dict by input"
    ):
        read_batches([(X, IDX)], ["x", "idx"])
    with pytest.raises(
        DatasetError,
        match=r"inputs given as a tuple of 2 values; give them as a dict by input name, "
        r"\{'x': \.\.\., 'idx': \.\.\.\}",
    ):
        read_batches([((X, IDX), Y)], ["x", "idx"])


def test_a_tuple_of_three_is_refused_not_stacked_into_one_input() -> None:
    with pytest.raises(DatasetError, match=r"batch 0 is a tuple of 3 values"):
        read_batches([(X, X, Y)], ["x"])
