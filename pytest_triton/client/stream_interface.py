"""The tensors a decoupled token generator speaks, declared once: the prompt, the token budget,
the stop condition, the sampling parameters and the streamed output, with their names, Triton
datatypes and shapes on the wire. The stream client, the served layout model and the parity
check all read one `StreamInterface`, so a model deployed with another backend's layout is
driven and checked without renaming anything.

Presets: `PROJECT` (pytest-triton's own layout, the default), `VLLM` (Triton's vLLM backend:
text in, text out, the budget in a JSON `sampling_parameters` string) and `TRTLLM` (Triton's
TensorRT-LLM backend: token ids in and out, batch and beam axes on the wire). A text layout
takes prompts as text (or token ids, decoded by its tokenizer, a `Codec`) and streams text
deltas; it is checked as text (parity/text_match.py), and its output tokens are the server's
`num_output_tokens` where the layout asks for them, else the whole streamed text encoded once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import numpy as np

from pytest_triton.base.errors import ConfigError

NUMPY = {
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT32": np.uint32,
    "BOOL": np.bool_,
    "BYTES": np.object_,
}

Prompt = Sequence[int] | str
"""A prompt as token ids, or (a text layout) as the text users send."""


class Codec(Protocol):
    """A tokenizer as a text layout needs it (a `tokenizers.Tokenizer` is one)."""

    def decode(self, ids: Sequence[int], /, skip_special_tokens: bool = True) -> str: ...

    def encode(self, text: str, /, *, add_special_tokens: bool = True) -> Any: ...  # `.ids`


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
    exclude_input: WireTensor | None = None
    return_count: WireTensor | None = None
    count: WireTensor | None = None

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
            self.exclude_input,
            self.return_count,
        )
        return tuple(t for t in declared if t is not None)

    def outputs(self) -> tuple[WireTensor, ...]:
        declared = (self.output, self.position, self.length, self.count)
        return tuple(t for t in declared if t is not None)

    def uncounted(self) -> StreamInterface:
        """This layout without the server's token counts (an older vLLM backend): output
        tokens then come from encoding the whole streamed text once."""
        return replace(self, return_count=None, count=None)

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
        prompt: Prompt,
        max_tokens: int,
        stop_token: int,
        codec: Codec | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> dict[str, np.ndarray[Any, Any]]:
        """The request's arrays by name: the prompt (a text layout's as text: given text
        as is, ids decoded through `codec`), its length, the budget, the stop token, the
        streaming, exclude-input and return-count flags, the sampling parameters (greedy:
        temperature 0, plus `sampling`)."""
        arrays = {self.prompt.name: self.prompt.array(self._prompt_values(prompt, codec))}
        for flag in (self.streaming, self.exclude_input, self.return_count):
            if flag is not None:
                arrays[flag.name] = flag.array([True])
        if self.prompt_length is not None:
            arrays[self.prompt_length.name] = self.prompt_length.array([len(prompt)])
        if self.max_tokens is not None:
            arrays[self.max_tokens.name] = self.max_tokens.array([max_tokens])
        if self.stop is not None:
            arrays[self.stop.name] = self.stop.array([stop_token])
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

    def _prompt_values(self, prompt: Prompt, codec: Codec | None) -> list[Any]:
        if not self.text:
            if isinstance(prompt, str):
                raise ConfigError(
                    f"stream interface {self.layout!r} takes token ids: give the prompt as "
                    "ids (its tokenizer's encode(text).ids), not as text"
                )
            return list(prompt)
        return [self.prompt_text(prompt, codec)]

    def prompt_text(self, prompt: Prompt, codec: Codec | None) -> str:
        """The text a text layout sends for `prompt` (ids decoded through `codec`)."""
        if isinstance(prompt, str):
            return prompt
        return self._codec(codec).decode(list(prompt))

    def prompt_ids(
        self, prompt: Prompt, codec: Codec | None, add_special_tokens: bool = True
    ) -> list[int]:
        """The ids the server generates from: an id layout's prompt as given; a text
        layout's text encoded as the server encodes it (the same tokenizer, the same
        special-token rule)."""
        if not self.text:
            return [int(t) for t in self._prompt_values(prompt, codec)]
        text = self.prompt_text(prompt, codec)
        return [
            int(i)
            for i in self._codec(codec).encode(text, add_special_tokens=add_special_tokens).ids
        ]

    def _codec(self, codec: Codec | None) -> Codec:
        if codec is None:
            raise ConfigError(
                f"stream interface {self.layout!r} speaks text: give a tokenizer (codec=) "
                "that turns the reference's token ids into text and back"
            )
        return codec

    def tokens(self, array: np.ndarray[Any, Any]) -> list[int]:
        """The token ids one response of an id layout streams."""
        return [int(v) for v in array.reshape(-1)]

    def delta(self, array: np.ndarray[Any, Any]) -> str:
        """The new text one response of a text layout streams (strict UTF-8: a server
        holds an incomplete character back)."""
        return "".join(v.decode() if isinstance(v, bytes) else str(v) for v in array.reshape(-1))

    def output_ids(self, text: str, codec: Codec | None) -> list[int]:
        """A whole streamed text's token ids, encoded once (no special tokens added): what
        a text layout's output tokens are counted from where the server gives no count."""
        return [int(i) for i in self._codec(codec).encode(text, add_special_tokens=False).ids]

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
    exclude_input=WireTensor("exclude_input_in_output", "BOOL"),
    return_count=WireTensor("return_num_output_tokens", "BOOL"),
    output=WireTensor("text_output", "BYTES", (-1,)),
    count=WireTensor("num_output_tokens", "UINT32", (-1,)),
)
"""Triton's vLLM backend: text_input, stream, sampling_parameters (JSON: max_tokens,
stop_token_ids, temperature), exclude_input_in_output, return_num_output_tokens ->
text_output (each response the new text of vLLM's incremental detokenizer) and
num_output_tokens (the tokens that response adds). `VLLM.uncounted()` for a backend without
the count."""

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
