"""Which kind of model triton-perf measures (single, stateful sequences, decoupled streams),
how it knows, and what each kind adds to a point. No locust import here.

The kind comes from the served config where triton-perf is given a server (`sequence_batching`
makes a stateful model, `model_transaction_policy { decoupled: true }` a stream), and from the
spec `-m` names where it serves the model itself; where both are known they must agree. A
stateful model is driven as perf_analyzer drives one: each concurrent slot owns a sequence
(START on its first request, END on its last, its CORRID from --sequence-id-range, its length
--sequence-length +- --sequence-length-variation); a decoupled model as AIPerf does: time to
first token, inter-token latency, output tokens/s.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.importing import load_object
from pytest_triton.load.measure.stream_log import StreamLog
from pytest_triton.load.runner.embedded import (
    EmbeddedModel,
    EmbeddedSequenceModel,
    EmbeddedStream,
    Served,
    Size,
    model_source,
)

if TYPE_CHECKING:  # the repository layer imports torch: only a spec of ours needs it
    from pytest_triton.repository.sequence import SequenceSpec

Kind = Literal["single", "sequence", "stream"]
KIND_WORDS: dict[Kind, str] = {
    "single": "a single model (one request, one response)",
    "sequence": "a stateful model (sequence_batching)",
    "stream": "a decoupled model (model_transaction_policy decoupled)",
}
SEQUENCE_LENGTH = 20
"""perf_analyzer's default --sequence-length."""
SEQUENCE_LENGTH_VARIATION = 20.0
"""perf_analyzer's default --sequence-length-variation, in %."""
SEQUENCE_ID_RANGE = (1, 2**31)
STREAM_ZOO = "tiny_stream"
SEQUENCE_ZOO = "streaming_gru"


@functools.lru_cache(maxsize=8)
def _made(source: str) -> Any:
    """What MODULE:CALLABLE returns (made once per process)."""
    return load_object(source)()


def _streaming_gru(size: Size) -> SequenceSpec:
    from pytest_triton.models import streaming_gru

    return streaming_gru.sequence_spec(size, "direct")


def perf_source(
    source: str, size: Size = "small", fmt: str | None = None, *, lazy: bool = False
) -> Served:
    """What `-m` names: a zoo model, the zoo's stateful `streaming_gru` or streaming
    `tiny_stream`, or MODULE:CALLABLE returning a ModelSpec, SequenceSpec or StreamSpec
    (made here to see which; with `lazy`, where the server says it serves a single model, it
    is taken for a ModelSpec and made when first needed)."""
    if source == SEQUENCE_ZOO:
        return EmbeddedSequenceModel(functools.partial(_streaming_gru, size))
    if (":" not in source and source != STREAM_ZOO) or (lazy and ":" in source):
        return model_source(source, size, fmt)  # a zoo model's spec is made when needed
    from pytest_triton.repository.sequence import SequenceSpec  # torch, for a spec of ours
    from pytest_triton.repository.spec import ModelSpec
    from pytest_triton.repository.stream import StreamSpec

    if source == STREAM_ZOO:
        from pytest_triton.models import tiny_generator

        return EmbeddedStream(tiny_generator.stream_spec())
    made = _made(source)
    if isinstance(made, SequenceSpec):
        return EmbeddedSequenceModel(made)
    if isinstance(made, StreamSpec):
        return EmbeddedStream(made)
    if isinstance(made, ModelSpec):
        return EmbeddedModel(made, fmt)
    raise ConfigError(
        f"-m {source} returned {type(made).__name__}: it must return a ModelSpec, a "
        "SequenceSpec (a stateful model) or a StreamSpec (a decoupled one)"
    )


def kind_of(served: Served) -> Kind:
    if isinstance(served, EmbeddedSequenceModel):
        return "sequence"
    if isinstance(served, EmbeddedStream):
        return "stream"
    return "single"


def served_kind(config: Mapping[str, Any]) -> Kind:
    """The kind of a model from the config the server reports it serves."""
    from pytest_triton.repository.served_config import served_message

    message = served_message(config)
    if message.model_transaction_policy.decoupled:
        return "stream"
    if message.HasField("sequence_batching"):
        return "sequence"
    return "single"


def sequence_strategy(config: Mapping[str, Any]) -> str:
    """The sequence batcher's strategy in a served config: direct or oldest."""
    from pytest_triton.repository.served_config import served_message

    batching = served_message(config).sequence_batching
    return "oldest" if batching.HasField("oldest") else "direct"


def check_kind(kind: Kind, served_as: Kind, name: str, source: str, where: str) -> None:
    """The spec `-m` names must be of the kind the server serves under `name`."""
    if kind != served_as:
        raise ConfigError(
            f"model {name!r} on {where} is {KIND_WORDS[served_as]}, but -m {source} is "
            f"{KIND_WORDS[kind]}: give -m the spec of the served model (MODULE:CALLABLE "
            "returning a ModelSpec, SequenceSpec or StreamSpec), or --model-name the model "
            "that -m describes"
        )


def check_kind_options(
    kind: Kind,
    config: TritonConfig,
    batches: Sequence[int],
    concurrencies: Sequence[int],
    open_loop: bool,
    transport: str,
) -> None:
    """What a sequence or stream sweep cannot do, refused before any load."""
    if kind == "single":
        return
    what = "sequence" if kind == "sequence" else "stream"
    if batches != [1]:
        raise ConfigError(
            f"-b {','.join(map(str, batches))}: a {what} model is measured one request per "
            f"{what} at a time (batch size 1); leave out -b"
        )
    if transport != "none":
        raise ConfigError(
            f"--shared-memory {transport}: the {what} users send through tritonclient's own "
            "requests, not shared memory; leave out --shared-memory"
        )
    if kind == "sequence":
        if open_loop:
            raise ConfigError(
                "--request-rate-range: triton-perf drives a stateful model in concurrency "
                "mode (each concurrent slot owns a sequence); use --concurrency-range"
            )
        start, end = config.load.sequence_id_range or SEQUENCE_ID_RANGE
        if end - start < max(concurrencies):
            raise ConfigError(
                f"--sequence-id-range {start}:{end} holds {end - start} ids, fewer than "
                f"concurrency {max(concurrencies)}: each sequence in flight needs its own id; "
                "widen the range"
            )


# -- what a kind adds to a point ---------------------------------------------------------------
SLICE_S = 0.25


@dataclass
class _Counts:
    checked: int = 0
    wrong: int = 0
    sequences: int = 0
    sequence_steps: int = 0


@dataclass
class KindTally:
    """Request events of sequence and stream users, counted by 250 ms slice: answers checked
    against the reference (the event's context says `checked`), wrong answers (the first one
    kept in words), sequences that ended (their END answered) and their lengths."""

    slices: dict[int, _Counts] = field(default_factory=dict)
    first_wrong: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def clear(self) -> None:
        with self._lock:
            self.slices.clear()
            self.first_wrong = None

    def on_request(
        self,
        exception: BaseException | None = None,
        context: Mapping[str, Any] | None = None,
        at: float | None = None,
        **_: Any,
    ) -> None:
        import time

        ctx = context or {}
        wrong = exception is not None and str(exception).startswith("wrong answer")
        key = int((time.time() if at is None else at) // SLICE_S)
        with self._lock:
            counts = self.slices.setdefault(key, _Counts())
            if ctx.get("checked") and (exception is None or wrong):
                counts.checked += 1
            if wrong:
                counts.wrong += 1
                if self.first_wrong is None:
                    self.first_wrong = str(exception)
            length = ctx.get("sequence_length")
            if length and exception is None:
                counts.sequences += 1
                counts.sequence_steps += int(length)

    def total(self, first: float = -math.inf, last: float = math.inf) -> _Counts:
        """The counts of the slices that began in [first, last)."""
        out = _Counts()
        with self._lock:
            for key, c in self.slices.items():
                if first <= key * SLICE_S < last:
                    out.checked += c.checked
                    out.wrong += c.wrong
                    out.sequences += c.sequences
                    out.sequence_steps += c.sequence_steps
        return out


def kind_figures(
    kind: Kind,
    tally: KindTally,
    streams: StreamLog | None,
    first: float,
    duration_s: float,
    stream_slo: bool = False,
) -> dict[str, Any]:
    """A point's figures of its kind: over the point's whole load (warm-up included) the
    answers checked and the wrong ones; over its measured windows [first, first + duration)
    the sequences that ended, or the streams' token timings (`stream_slo`: a TTFT or ITL SLO
    was set, so the share of good streams means something)."""
    whole = tally.total()
    out: dict[str, Any] = {
        "kind": kind,
        "answers_checked": whole.checked,
        "wrong_answers": whole.wrong,
        "first_wrong_answer": tally.first_wrong,
    }
    if kind == "sequence":
        measured = tally.total(first, first + duration_s)
        out["sequences"] = measured.sequences
        out["mean_sequence_length"] = (
            measured.sequence_steps / measured.sequences if measured.sequences else None
        )
    elif kind == "stream" and streams is not None:
        figures = streams.figures(first, first + duration_s)
        if figures is None:  # windows within one of the log's whole seconds: widen to them
            figures = streams.figures(math.floor(first), math.ceil(first + duration_s))
        if figures is not None:
            d = figures.as_dict()
            out.update(
                {
                    key: (None if isinstance(d[key], float) and math.isnan(d[key]) else d[key])
                    for key in (
                        "ttft_p50_ms",
                        "ttft_p90_ms",
                        "ttft_p99_ms",
                        "itl_p50_ms",
                        "itl_p90_ms",
                        "itl_p99_ms",
                        "output_tokens_per_s",
                        "streams_per_s",
                    )
                }
            )
            out["streams"] = figures.streams
            out["failed_streams"] = figures.failed
            out["output_tokens"] = figures.tokens
            good = figures.goodput
            out["stream_goodput"] = None if math.isnan(good) or not stream_slo else good
    return out
