"""The tensors a decoupled token generator speaks, declared once: the prompt, the token budget,
the stop condition, the sampling parameters and the streamed output, with their names, Triton
datatypes and shapes on the wire. The stream client, the served layout model and the parity
check all read one `StreamInterface`, so a model deployed with another backend's layout is
driven and checked without renaming anything.

Presets: `PROJECT` (pytest-triton's own layout, the default), `VLLM` (Triton's vLLM backend:
text in, text out, the budget in a JSON `sampling_parameters` string) and `TRTLLM` (Triton's
TensorRT-LLM backend: token ids in and out, batch and beam axes on the wire). A text layout
needs a tokenizer (`Codec`) to turn the reference's token ids into text and back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import numpy as np

from pytest_triton.base.errors import ConfigError

NUMPY = {"INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_, "BYTES": np.object_}


class Codec(Protocol):
    """A tokenizer as a text layout needs it (a `tokenizers.Tokenizer` is one)."""

    def decode(self, ids: Sequence[int]) -> str: ...

    def encode(self, text: str) -> Any: ...  # an object with `.ids`


@dataclass(frozen=True)
class WireTensor:
    """One tensor on the wire: name, Triton datatype, shape (-1: the tokens' axis)."""

    name: str
    datatype: str
    shape: tuple[int, ...] = (1,)

    def __post_init__(self) -> None:
        if self.datatype not in NUMPY:
            raise ConfigError(
                f"tensor {self.name!r}: datatype {self.datatype!r} is not one of {sorted(NUMPY)}"
            )

    def array(self, values: Sequence[Any]) -> np.ndarray[Any, Any]:
        """`values` shaped for the wire (the -1 axis takes their count)."""
        shape = [len(values) if d == -1 else d for d in self.shape]
        if self.datatype == "BYTES":
            return np.array([str(v).encode() for v in values], dtype=np.object_).reshape(shape)
        return np.asarray(values, dtype=NUMPY[self.datatype]).reshape(shape)


@dataclass(frozen=True)
class StreamInterface:
    """A decoupled generator's layout. `max_tokens` and `stop` None: they go in the sampling
    parameters (`sampling_keys` names their keys there); `streaming` (BOOL, sent true) and
    `prompt_length` are sent where declared. The output's values in one response are the
    tokens (or, BYTES, the text) that response streams; `position` (the token's index in
    the stream) and `length` (prompt and tokens so far) go beside it where declared."""

    layout: str
    prompt: WireTensor
    output: WireTensor
    max_tokens: WireTensor | None = None
    stop: WireTensor | None = None
    prompt_length: WireTensor | None = None
    streaming: WireTensor | None = None
    sampling: WireTensor | None = None
    sampling_keys: tuple[str, str] = ("max_tokens", "stop_token_ids")
    position: WireTensor | None = None
    length: WireTensor | None = None

    def __post_init__(self) -> None:
        if self.max_tokens is None and self.sampling is None:
            raise ConfigError(
                f"stream interface {self.layout!r} declares no token budget: give max_tokens "
                "(a tensor) or sampling (a JSON tensor that carries it)"
            )

    @property
    def text(self) -> bool:
        """Text in and out: the prompt and the output are BYTES, read through a Codec."""
        return self.prompt.datatype == "BYTES"

    def inputs(self) -> tuple[WireTensor, ...]:
        declared = (
            self.prompt,
            self.prompt_length,
            self.max_tokens,
            self.stop,
            self.streaming,
            self.sampling,
        )
        return tuple(t for t in declared if t is not None)

    def outputs(self) -> tuple[WireTensor, ...]:
        return tuple(t for t in (self.output, self.position, self.length) if t is not None)

    def optional(self, tensor: WireTensor) -> bool:
        """Whether a request may leave the input out (all but the prompt and the budget)."""
        return tensor not in (self.prompt, self.max_tokens, self.sampling) or (
            tensor == self.sampling and self.max_tokens is not None
        )

    def mismatches(self, inputs: Mapping[str, str], outputs: Mapping[str, str]) -> list[str]:
        """What the served model (its inputs and outputs, name -> datatype) lacks of this
        interface, each naming the tensor and what the model has."""
        problems = []
        for kind, declared, served in (
            ("input", self.inputs(), inputs),
            ("output", self.outputs(), outputs),
        ):
            for tensor in declared:
                has = served.get(tensor.name)
                if has is None:
                    problems.append(
                        f"the {self.layout!r} layout's {kind} {tensor.name!r} ({tensor.datatype}) "
                        f"is not among the model's {kind}s: {dict(served)}"
                    )
                elif has != tensor.datatype:
                    problems.append(
                        f"the {self.layout!r} layout's {kind} {tensor.name!r} is "
                        f"{tensor.datatype}; the model's is {has}"
                    )
        return problems

    def request(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        stop_token: int,
        codec: Codec | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> dict[str, np.ndarray[Any, Any]]:
        """The request's arrays by name: the prompt (as text through `codec` in a text
        layout), its length, the budget, the stop token, the streaming flag, the sampling
        parameters (greedy: temperature 0, plus `sampling`)."""
        arrays = {self.prompt.name: self.prompt.array(self._prompt_values(prompt, codec))}
        if self.prompt_length is not None:
            arrays[self.prompt_length.name] = self.prompt_length.array([len(prompt)])
        if self.max_tokens is not None:
            arrays[self.max_tokens.name] = self.max_tokens.array([max_tokens])
        if self.stop is not None:
            arrays[self.stop.name] = self.stop.array([stop_token])
        if self.streaming is not None:
            arrays[self.streaming.name] = self.streaming.array([True])
        if self.sampling is not None:
            fields: dict[str, Any] = {"temperature": 0.0}
            if self.max_tokens is None:
                budget_key, stop_key = self.sampling_keys
                fields[budget_key] = max_tokens
                if stop_token >= 0:
                    fields[stop_key] = [stop_token]
            fields.update(sampling or {})
            arrays[self.sampling.name] = self.sampling.array([json.dumps(fields)])
        return arrays

    def _prompt_values(self, prompt: Sequence[int], codec: Codec | None) -> list[Any]:
        if not self.text:
            return list(prompt)
        return [self._codec(codec).decode(list(prompt))]

    def _codec(self, codec: Codec | None) -> Codec:
        if codec is None:
            raise ConfigError(
                f"stream interface {self.layout!r} speaks text: give a tokenizer (codec=) "
                "that turns the reference's token ids into text and back"
            )
        return codec

    def tokens(self, array: np.ndarray[Any, Any], codec: Codec | None = None) -> list[int]:
        """The token ids one response streams (a text layout's text encoded by `codec`)."""
        if not self.text:
            return [int(v) for v in array.reshape(-1)]
        ids: list[int] = []
        for value in array.reshape(-1):
            text = value.decode() if isinstance(value, bytes) else str(value)
            ids.extend(int(i) for i in self._codec(codec).encode(text).ids)
        return ids

    def to_json(self) -> str:
        """The interface as JSON (the served layout model reads it from its config)."""
        return json.dumps(asdict(self))

    def renamed(self, **names: str) -> StreamInterface:
        """The same layout with some tensors named otherwise (by field: prompt=..., ...)."""
        fields: dict[str, Any] = {}
        for field_name, new in names.items():
            tensor = getattr(self, field_name, None)
            if not isinstance(tensor, WireTensor):
                raise ConfigError(f"stream interface has no tensor field {field_name!r}")
            fields[field_name] = replace(tensor, name=new)
        return replace(self, **fields)


PROJECT = StreamInterface(
    layout="pytest-triton",
    prompt=WireTensor("PROMPT", "INT64", (-1,)),
    max_tokens=WireTensor("MAX_TOKENS", "INT32"),
    stop=WireTensor("STOP_TOKEN", "INT32"),
    output=WireTensor("TOKEN", "INT64"),
    position=WireTensor("POSITION", "INT32"),
)
"""pytest-triton's own layout (repository/stream.py serves it): PROMPT, MAX_TOKENS,
STOP_TOKEN -> TOKEN, POSITION."""

VLLM = StreamInterface(
    layout="vllm",
    prompt=WireTensor("text_input", "BYTES"),
    streaming=WireTensor("stream", "BOOL"),
    sampling=WireTensor("sampling_parameters", "BYTES"),
    output=WireTensor("text_output", "BYTES"),
)
"""Triton's vLLM backend: text_input, stream, sampling_parameters (JSON: max_tokens,
stop_token_ids, temperature) -> text_output (each response the new text)."""

TRTLLM = StreamInterface(
    layout="tensorrt-llm",
    prompt=WireTensor("input_ids", "INT32", (1, -1)),
    prompt_length=WireTensor("input_lengths", "INT32", (1, 1)),
    max_tokens=WireTensor("request_output_len", "INT32", (1, 1)),
    streaming=WireTensor("streaming", "BOOL", (1, 1)),
    stop=WireTensor("end_id", "INT32", (1, 1)),
    output=WireTensor("output_ids", "INT32", (1, 1, -1)),
    length=WireTensor("sequence_length", "INT32", (1, 1)),
)
"""Triton's TensorRT-LLM backend: input_ids, input_lengths, request_output_len, streaming,
end_id -> output_ids [batch, beam, tokens], sequence_length (batch 1, beam 1 on the wire)."""
