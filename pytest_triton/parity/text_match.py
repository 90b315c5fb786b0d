"""Parity of text streams: the text a text layout (vLLM's) streamed, the concatenation of its
deltas, against the reference's greedy ids decoded as a server's incremental detokenizer
decodes them: in the context of the prompt, an incomplete character at the end held back, a
stop token's text left out (vLLM's rule; it still counts as an output token). Texts are
compared, not ids: most ids of a BPE tokenizer do not survive decode -> encode alone. A
difference names the first differing character, the reference token it falls in (through
the reference's offsets) and both texts around it; a right text whose token count differs
from the reference's is a count difference, not a wrong answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_triton.base.errors import WrongAnswer
from pytest_triton.client.stream_interface import Codec

HELD_BACK = "\ufffd"
"""What a decoder gives for an incomplete UTF-8 sequence; a server holds it back at the end."""
AROUND = 12
"""Characters of each text shown on each side of the first difference."""


def generated_text(
    codec: Codec, prompt_ids: Sequence[int], ids: Sequence[int], stop_token: int = -1
) -> str:
    """The text of `ids` generated after `prompt_ids`, as a server streams it in all: the
    decode of prompt and ids past the decode of the prompt alone, a trailing incomplete
    character held back, a final stop token's text left out."""
    ids = list(ids)
    if ids and ids[-1] == stop_token:
        ids = ids[:-1]
    head = codec.decode(list(prompt_ids))
    whole = codec.decode([*prompt_ids, *ids])
    if not whole.startswith(head):  # the prompt's text changed with what followed it
        head = head.rstrip(HELD_BACK)
    return whole[len(head) :].rstrip(HELD_BACK)


@dataclass(frozen=True)
class TextReference:
    """What a right text stream carries: the prompt's ids (as the server encodes the
    prompt), the greedy ids after it (the stop token, when generated, the last) and their
    text."""

    codec: Codec
    prompt_ids: tuple[int, ...]
    ids: tuple[int, ...]
    text: str
    stop_token: int = -1

    @classmethod
    def of(
        cls, codec: Codec, prompt_ids: Sequence[int], ids: Sequence[int], stop_token: int = -1
    ) -> TextReference:
        text = generated_text(codec, prompt_ids, ids, stop_token)
        return cls(codec, tuple(prompt_ids), tuple(ids), text, stop_token)

    def token_at(self, char: int) -> int:
        """The position of the generated token whose text holds character `char` (the
        token count when `char` is past the text)."""
        for position in range(len(self.ids)):
            upto = generated_text(self.codec, self.prompt_ids, self.ids[: position + 1])
            if len(upto) > char:
                return position
        return len(self.ids)


@dataclass(frozen=True)
class TextMismatch:
    """Where a streamed text first differs from the reference's."""

    char: int
    token: int
    served: str
    expected: str

    def describe(self, context: str = "") -> str:
        def around(text: str) -> str:
            return repr(text[max(0, self.char - AROUND) : self.char + AROUND])

        def at(text: str) -> str:
            return repr(text[self.char]) if self.char < len(text) else "the end of the text"

        where = f"{context}: " if context else ""
        return (
            f"{where}streamed text differs from PyTorch's greedy generation first at "
            f"character {self.char}, in token position {self.token}: served "
            f"{at(self.served)}, expected {at(self.expected)} (served ...{around(self.served)}"
            f"..., expected ...{around(self.expected)}...; {len(self.served)} characters "
            f"served, {len(self.expected)} expected)"
        )


def first_text_difference(served: str, reference: TextReference) -> TextMismatch | None:
    """The first character where the served text differs from the reference's (None: equal)."""
    expected = reference.text
    if served == expected:
        return None
    char = next(
        (i for i, (a, b) in enumerate(zip(served, expected, strict=False)) if a != b),
        min(len(served), len(expected)),
    )
    return TextMismatch(char, reference.token_at(char), served, expected)


def assert_text_parity(served: str, reference: TextReference, *, context: str = "") -> None:
    """Raise AssertionError naming the first differing character and its token position."""
    mismatch = first_text_difference(served, reference)
    if mismatch is not None:
        raise AssertionError(mismatch.describe(context))


def wrong_text(served: str, reference: TextReference, *, context: str = "") -> WrongAnswer | None:
    """The WrongAnswer a load generator reports for a wrong text stream, or None when right."""
    mismatch = first_text_difference(served, reference)
    if mismatch is None:
        return None
    return WrongAnswer(f"wrong answer: {mismatch.describe(context)}")


def count_difference(
    served_count: int | None, reference: TextReference, *, context: str = ""
) -> str | None:
    """A right text whose server token count is not the reference's, said as such (None:
    no count from the server, or the same count)."""
    if served_count is None or served_count == len(reference.ids):
        return None
    where = f"{context}: " if context else ""
    return (
        f"{where}count difference (the text is right): the server counted {served_count} "
        f"output tokens, the reference generated {len(reference.ids)}"
    )
