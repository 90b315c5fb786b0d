"""A deployed model's served config against the config its spec would have: the signature
(input and output names, types, dims), max_batch_size, dynamic batching, and what serves it.

A release gate against a running service first asks "is this the model I think it is?": a
served config that differs from the spec makes every later number meaningless, so each
difference is named before any request is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.repository.variants import NATIVE_BACKEND, Variant


def served_message(served: Mapping[str, Any]) -> mc.ModelConfig:
    """The served config (JSON as Triton's HTTP API gives it) as a ModelConfig message."""
    return json_format.ParseDict(dict(served), mc.ModelConfig(), ignore_unknown_fields=True)


def _type(value: int) -> str:
    return str(mc.DataType.Name(value))


def _tensors(kind: str, expected: Any, served: Any) -> list[str]:
    problems: list[str] = []
    have = {t.name: t for t in served}
    for tensor in expected:
        got = have.get(tensor.name)
        if got is None:
            names = ", ".join(sorted(have)) or "none"
            problems.append(f"{kind} {tensor.name!r} is missing on the server (it serves: {names})")
            continue
        if got.data_type != tensor.data_type:
            problems.append(
                f"{kind} {tensor.name!r} is {_type(got.data_type)} on the server, the spec "
                f"exports {_type(tensor.data_type)}"
            )
        want_dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        got_dims = list(got.reshape.shape) if got.HasField("reshape") else list(got.dims)
        if got_dims != want_dims and list(got.dims) != list(tensor.dims):
            problems.append(
                f"{kind} {tensor.name!r} has dims {list(got.dims)} on the server, the spec "
                f"exports {list(tensor.dims)}"
            )
    if kind == "input":
        extra = sorted(set(have) - {t.name for t in expected})
        if extra:
            problems.append(f"the server takes inputs the spec does not give: {', '.join(extra)}")
    return problems


def _batching(expected: mc.ModelConfig, served: mc.ModelConfig) -> list[str]:
    want, got = expected.HasField("dynamic_batching"), served.HasField("dynamic_batching")
    if want != got:
        return [
            "dynamic batching is "
            + (
                "off on the server, the spec asks for it"
                if want
                else "on on the server, the spec has none"
            )
        ]
    if not want:
        return []
    problems = []
    w, g = expected.dynamic_batching, served.dynamic_batching
    if w.max_queue_delay_microseconds != g.max_queue_delay_microseconds:
        problems.append(
            f"dynamic batching waits {g.max_queue_delay_microseconds} us on the server, the spec "
            f"says {w.max_queue_delay_microseconds} us (max_queue_delay_microseconds)"
        )
    # Triton completes an empty preferred_batch_size with max_batch_size: compare given ones.
    if w.preferred_batch_size and sorted(w.preferred_batch_size) != sorted(g.preferred_batch_size):
        problems.append(
            f"preferred batch sizes are {list(g.preferred_batch_size)} on the server, the spec "
            f"says {list(w.preferred_batch_size)}"
        )
    return problems


def _served_by(variant: Variant, served: mc.ModelConfig) -> list[str]:
    """A natively served format must run on its backend; python may host any artifact."""
    backend, platform = NATIVE_BACKEND[variant.format]
    if served.backend == "python" or served.platform == platform or served.backend == backend:
        return []
    what = served.platform or served.backend or "an unknown backend"
    return [f"the server runs it on {what}, the spec's format {variant.format!r} needs {platform}"]


def config_differences(
    variant: Variant, expected: mc.ModelConfig, served: Mapping[str, Any]
) -> list[str]:
    """Every way the served config differs from the expected one, in words; [] when none."""
    got = served_message(served)
    problems: list[str] = []
    if got.max_batch_size != expected.max_batch_size:
        problems.append(
            f"max_batch_size is {got.max_batch_size} on the server, the spec says "
            f"{expected.max_batch_size}"
        )
    problems += _tensors("input", expected.input, got.input)
    problems += _tensors("output", expected.output, got.output)
    problems += _batching(expected, got)
    problems += _served_by(variant, got)
    return problems
