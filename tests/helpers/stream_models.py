"""A stream model that goes wrong on purpose, built on the served stream model
(stream_model.py): its model.py followed by a subclass that, when a request's `fault`
parameter asks, breaks one step. The checks are proved against the real decoupled model with
one fault, and one test model (one python stub) serves every fault."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit

from pytest_triton.client.stream_interface import TRTLLM, VLLM
from pytest_triton.models.gru_lm import gru_lm_spec
from pytest_triton.repository.stream import MODEL_SOURCE, StreamSpec, write_stream_model

CORRUPT_AT = 5
ERROR_AT = 3
FINAL_DELAY_S = 3.0
SLOW_TOKEN_S = 0.1

FAULTY = f"""

class TritonPythonModel(TritonPythonModel):
    # corrupt: one token wrong on the wire at position {CORRUPT_AT} (generation goes on from
    #   the right one); error: an error response at position {ERROR_AT}; no_final: every
    #   token, then silence (the final flag only after {FINAL_DELAY_S} s, so that the server
    #   still completes the request before it stops); slow: {SLOW_TOKEN_S} s per token;
    #   miscount: the response at position {ERROR_AT} says it carries 2 tokens; finish_error:
    #   finishing the stream raises. Read per request: the iteration schedule interleaves
    #   streams.
    def _fault(self, request):
        return json.loads(request.parameters() or "{{}}").get("fault", "")

    def token(self, request, position, token):
        fault = self._fault(request)
        if fault == "corrupt" and position == {CORRUPT_AT}:
            return (token + 1) % self.vocab
        if fault == "error" and position == {ERROR_AT}:
            raise RuntimeError("injected failure at token {ERROR_AT}")
        if fault == "slow":
            import time
            time.sleep({SLOW_TOKEN_S})
        return token

    def counted(self, request, position):
        return 2 if self._fault(request) == "miscount" and position == {ERROR_AT} else 1

    def finish(self, request, sender):
        fault = self._fault(request)
        if fault == "finish_error":
            raise RuntimeError("injected failure while finishing the stream")
        if fault != "no_final":
            return super().finish(request, sender)
        import threading
        threading.Timer({FINAL_DELAY_S}, super().finish, (request, sender)).start()
"""


def write_faulty(root: Path, spec: StreamSpec) -> str:
    """root/<spec name>_faulty, the spec's generator with faults on request; its name."""
    name = f"{spec.name}_faulty"
    write_stream_model(
        root, dataclasses.replace(spec, name=name, instances=1), MODEL_SOURCE.read_text() + FAULTY
    )
    return name


LAYOUT_VOCAB = 32


def word_tokenizer() -> Tokenizer:
    """A WordLevel tokenizer built in code whose ids are the model's: "w0" .. "w31" (and
    [UNK] past them, which the model refuses as outside its vocabulary)."""
    words = {f"w{i}": i for i in range(LAYOUT_VOCAB)} | {"[UNK]": LAYOUT_VOCAB}
    tokenizer = Tokenizer(WordLevel(words, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    return tokenizer


LAYOUT_BASE = gru_lm_spec(vocab=LAYOUT_VOCAB)
"""One GRU language model served in each backend's layout (its greedy generation the
reference of every one)."""
LAYOUT_SPECS = {
    "vllm": StreamSpec(
        "vllm_lm",
        LAYOUT_BASE.generator,
        LAYOUT_VOCAB,
        interface=VLLM,
        tokenizer=word_tokenizer(),
        instances=1,
    ),
    "trtllm": StreamSpec(
        "trtllm_lm", LAYOUT_BASE.generator, LAYOUT_VOCAB, interface=TRTLLM, instances=1
    ),
}


def trtllm_layout_spec() -> StreamSpec:
    """The TensorRT-LLM-layout spec, for `triton-perf -m tests.helpers.stream_models:...`."""
    return LAYOUT_SPECS["trtllm"]


def vllm_layout_spec() -> StreamSpec:
    """The vLLM-layout spec, for `triton-perf -m tests.helpers.stream_models:...`."""
    return LAYOUT_SPECS["vllm"]
