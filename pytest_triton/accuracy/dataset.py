"""A dataset as an accuracy check reads it: an iterable of batches (a DataLoader or a plain
list), each the model's inputs (a dict by input name, or one array for a one-input model),
optionally paired with its labels as `(inputs, labels)`; arrays in a tuple are never taken
for several inputs. Checked against the model's inputs before any request is sent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_triton.base.dtypes import Array, tensor_type
from pytest_triton.base.errors import DatasetError, SpecError


@dataclass(frozen=True)
class Batch:
    inputs: dict[str, Array]
    labels: Array | None

    @property
    def rows(self) -> int:
        return int(next(iter(self.inputs.values())).shape[0])


def _array(value: Any) -> Array:
    """numpy arrays as they are; torch tensors (and anything with __array__) through numpy."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _inputs(index: int, given: Any, input_names: Sequence[str]) -> dict[str, Array]:
    """A batch's inputs: a dict by input name, or one array for a one-input model. Arrays in
    a tuple or list are refused: their order is not a name."""
    if isinstance(given, Mapping):
        return {str(k): _array(v) for k, v in given.items()}
    if isinstance(given, tuple | list):
        by_name = ", ".join(f"{n!r}: ..." for n in input_names)
        raise DatasetError(
            f"batch {index}: inputs given as a {type(given).__name__} of {len(given)} values; "
            f"give them as a dict by input name, {{{by_name}}}, and a batch as that dict or "
            "as (inputs, labels)"
        )
    if len(input_names) != 1:
        raise DatasetError(
            f"batch {index}: inputs given as one array but the model has inputs "
            f"{list(input_names)}; give them as a dict by input name (a pair of arrays is read "
            "as (inputs, labels))"
        )
    return {input_names[0]: _array(given)}


def read_batches(dataset: Iterable[Any], input_names: Sequence[str]) -> list[Batch]:
    """Every batch of the dataset, inputs named as the model names them. A batch is its
    inputs, or `(inputs, labels)` (a tuple or list of two, as a DataLoader gives them)."""
    batches = []
    for index, item in enumerate(dataset):
        labels = None
        if isinstance(item, tuple | list):
            if len(item) != 2:
                raise DatasetError(
                    f"batch {index} is a {type(item).__name__} of {len(item)} values: give a "
                    "batch as its inputs (a dict by input name, or one array for a one-input "
                    "model) or as (inputs, labels)"
                )
            item, labels = item[0], _array(item[1])
        batches.append(Batch(_inputs(index, item, input_names), labels))
    if not batches:
        raise DatasetError("the dataset has no batches")
    return batches


def check_batches(batches: Sequence[Batch], metadata: Mapping[str, Any]) -> None:
    """Refuse, naming the input, batches whose names, datatypes or shapes the model does not
    take (its metadata, whose shapes include the batch dimension: -1 takes any size)."""
    model = metadata.get("name", "?")
    wanted = {i["name"]: i for i in metadata.get("inputs", [])}
    for index, batch in enumerate(batches):
        given = set(batch.inputs)
        if given != set(wanted):
            missing, extra = sorted(set(wanted) - given), sorted(given - set(wanted))
            raise DatasetError(
                f"batch {index} does not fit model {model!r}: missing inputs {missing}, "
                f"unknown inputs {extra} (the model takes {sorted(wanted)})"
            )
        for name, array in batch.inputs.items():
            spec = wanted[name]
            try:
                wire = tensor_type(array.dtype).wire
            except SpecError:
                wire = str(array.dtype)
            if wire != spec["datatype"]:
                raise DatasetError(
                    f"batch {index}, input {name!r}: datatype {wire} but model {model!r} "
                    f"takes {spec['datatype']}: convert it first"
                )
            shape = [int(d) for d in spec["shape"]]
            fits = len(shape) == array.ndim and all(
                d in (-1, s) for d, s in zip(shape, array.shape, strict=True)
            )
            if not fits:
                raise DatasetError(
                    f"batch {index}, input {name!r}: shape {list(array.shape)} but model "
                    f"{model!r} takes {shape} (-1: any size)"
                )
        rows = {a.shape[0] for a in batch.inputs.values()}
        label_rows = None if batch.labels is None else batch.labels.shape[0]
        if len(rows) > 1 or (label_rows is not None and label_rows not in rows):
            raise DatasetError(
                f"batch {index}: its inputs and labels have different numbers of rows "
                f"(inputs {sorted(rows)}, labels {label_rows})"
            )
