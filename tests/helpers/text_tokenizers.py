"""The tokenizers people deploy, trained here with `tokenizers` on a tiny corpus (nothing
downloaded, well under a second each): WordLevel, byte-level BPE (GPT-2's scheme: bytes
mapped to characters, so a character outside ASCII spans several tokens) and Metaspace BPE
(SentencePiece's, Llama's: "▁" marks a word's start, a BOS added to every prompt). One GRU
language model per tokenizer, its vocabulary the tokenizer's, served in the vLLM layout."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from pytest_triton.client.stream_interface import VLLM
from pytest_triton.models.gru_lm import gru_lm
from pytest_triton.repository.stream import StreamSpec

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "streaming tokens from a server is tested against the reference",
    "grüße aus köln, café crème et naïve façade",
    "日本語のテキストも流れる 東京 大阪",
    "emoji 🙂 and accents: é è ê ë, ñ, ø",
    "interesting things happening during testing and serving",
]
PROMPTS = [
    "the quick brown fox",
    "grüße aus köln",
    "日本語のテキスト",
    "serving tokens 🙂",
]
"""Prompts as users send them: text, some of it outside ASCII."""


def word_level() -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(
        CORPUS, trainers.WordLevelTrainer(special_tokens=["[UNK]"], show_progress=False)
    )
    return tokenizer


def byte_level_bpe() -> Tokenizer:
    """GPT-2's scheme: byte-level pre-tokenizer and decoder, no special tokens added."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        show_progress=False,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def metaspace_bpe() -> Tokenizer:
    """SentencePiece's (Llama's) scheme: Metaspace pre-tokenizer and decoder ("▁" starts a
    word, the first word's space dropped), a BOS before every encoded prompt."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=160, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    return tokenizer


BUILDERS: dict[str, Callable[[], Tokenizer]] = {
    "wordlevel": word_level,
    "bytelevel_bpe": byte_level_bpe,
    "metaspace_bpe": metaspace_bpe,
}
SCHEMES = sorted(BUILDERS)


@functools.cache
def tokenizer(scheme: str) -> Tokenizer:
    return BUILDERS[scheme]()


@functools.cache
def text_spec(scheme: str) -> StreamSpec:
    """A GRU language model over the scheme's vocabulary, served in the vLLM layout."""
    trained = tokenizer(scheme)
    vocab = trained.get_vocab_size()
    return StreamSpec(
        f"vllm_{scheme}",
        functools.partial(gru_lm, 0, vocab),
        vocab,
        interface=VLLM,
        tokenizer=trained,
        instances=1,
    )


def uncounted_spec(scheme: str) -> StreamSpec:
    """The same model in the vLLM layout without num_output_tokens."""
    spec = text_spec(scheme)
    return dataclasses.replace(
        spec, name=f"{spec.name}_uncounted", interface=spec.interface.uncounted()
    )


def metaspace_bpe_spec() -> StreamSpec:
    """The Metaspace BPE (Llama-style) model, for `triton-perf -m
    tests.helpers.text_tokenizers:metaspace_bpe_spec`."""
    return text_spec("metaspace_bpe")


def bytelevel_bpe_spec() -> StreamSpec:
    """The byte-level BPE (GPT-2-style) model, for triton-perf's -m."""
    return text_spec("bytelevel_bpe")
