"""Helpers every zoo model shares: seeded construction and checkpoint loading.

Models are constructed on the meta device and then initialised from a local
``torch.Generator`` so that building a model never reads or advances the global RNG:
a test that builds a zoo model must not change what any other test draws.
"""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union

import torch
from torch import nn

from pytest_triton.base.errors import TritonTestError

PathLike = Union[str, "os.PathLike[str]"]
M = TypeVar("M", bound=nn.Module)

_SHOWN_KEYS = 12  # keys listed in a mismatch message; the rest are counted


class CheckpointError(TritonTestError, ValueError):
    """A checkpoint that cannot be loaded into a zoo model; names the keys at fault."""


def generator(seed: int) -> torch.Generator:
    """A CPU generator for ``seed``; all zoo randomness goes through one of these."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return gen


def materialize(
    construct: Callable[[], M],
    init: Callable[[M, torch.Generator], None],
    seed: int,
    checkpoint: PathLike | None = None,
) -> M:
    """Construct on meta, allocate, seed-initialise, optionally load a checkpoint, eval().

    Every float tensor is poisoned with NaN before ``init`` runs, so a parameter or buffer
    that an init function forgets is caught here instead of leaking uninitialised memory
    (which would make "same seed, same model" flaky).
    """
    gen = generator(seed)
    with torch.device("meta"):
        model = construct()
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for tensor in _tensors(model):
            if tensor.is_floating_point():
                tensor.fill_(math.nan)
        init(model, gen)
        missed = [n for n, t in _named_tensors(model) if t.is_floating_point() and t.isnan().any()]
    if missed:
        raise RuntimeError(f"{type(model).__name__}: init left tensors uninitialised: {missed}")
    if checkpoint is not None:
        load_checkpoint(model, checkpoint)
    return model.eval()


def _named_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    named: list[tuple[str, torch.Tensor]] = list(model.named_parameters())
    named.extend(model.named_buffers())
    return named


def _tensors(model: nn.Module) -> list[torch.Tensor]:
    return [t for _, t in _named_tensors(model)]


def init_batchnorm(bn: nn.modules.batchnorm._BatchNorm, gen: torch.Generator, gamma: float) -> None:
    """Non-trivial running statistics, so exported BN folding is really exercised.

    ``gamma`` scales the affine weight; residual branches use a small one so that a deep
    randomly initialised network neither explodes nor saturates in eval mode.
    """
    assert bn.weight is not None and bn.bias is not None
    assert bn.running_mean is not None and bn.running_var is not None
    bn.weight.uniform_(0.75 * gamma, 1.25 * gamma, generator=gen)
    bn.bias.normal_(0.0, 0.05, generator=gen)
    bn.running_mean.normal_(0.0, 0.05, generator=gen)
    bn.running_var.uniform_(0.75, 1.25, generator=gen)
    if bn.num_batches_tracked is not None:
        bn.num_batches_tracked.zero_()


def init_layernorm(ln: nn.LayerNorm) -> None:
    ln.weight.fill_(1.0)
    ln.bias.fill_(0.0)


def extract_state_dict(obj: object, source: str) -> dict[str, torch.Tensor]:
    """The state_dict inside a loaded checkpoint, with DataParallel's ``module.`` removed.

    Accepts a raw state_dict or a dict holding it under ``state_dict`` or ``model`` (what
    Lightning, NVIDIA's examples and most training loops save).
    """
    if isinstance(obj, Mapping):
        for key in ("state_dict", "model"):
            inner = obj.get(key)
            if isinstance(inner, Mapping):
                obj = inner
                break
    if not isinstance(obj, Mapping) or not obj:
        raise CheckpointError(
            f"checkpoint {source}: expected a state_dict (a dict of tensors) or a dict with a "
            f"'state_dict' or 'model' entry, got {type(obj).__name__}"
        )
    state: dict[str, torch.Tensor] = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"checkpoint {source}: entry {key!r} is a {type(value).__name__}, not a tensor; "
                "save model.state_dict()"
            )
        state[key.removeprefix("module.")] = value
    return state


def _show(keys: list[str]) -> str:
    shown = ", ".join(keys[:_SHOWN_KEYS])
    more = len(keys) - _SHOWN_KEYS
    return shown + (f" ... and {more} more" if more > 0 else "")


def load_state(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Strict load that says which keys are missing/unexpected and which shapes differ."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [
        f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in expected
        if k in state and state[k].shape != expected[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing keys ({len(missing)}): {_show(missing)}")
    if unexpected:
        problems.append(f"unexpected keys ({len(unexpected)}): {_show(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatches ({len(mismatched)}): {_show(mismatched)}")
    if problems:
        raise CheckpointError(
            f"checkpoint {source} does not fit {type(model).__name__} (was it saved from the "
            "same architecture and config?): " + "; ".join(problems)
        )
    model.load_state_dict(state, strict=True)


def load_checkpoint(model: nn.Module, path: PathLike) -> None:
    """Load ``path`` (a torch.save file) into ``model`` strictly, on CPU, weights only."""
    source = os.fspath(path)
    if not os.path.isfile(source):
        raise CheckpointError(f"checkpoint {source} does not exist or is not a file")
    try:
        obj: Any = torch.load(source, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {source} could not be read as a weights-only torch.save file: {exc}"
        ) from exc
    load_state(model, extract_state_dict(obj, source), source)
