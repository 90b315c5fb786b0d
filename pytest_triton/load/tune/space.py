"""What triton-tune may change: one candidate serving configuration, and the search space.

A candidate is a config.pbtxt's serving fields (format, max_batch_size, dynamic batching with
its queue delay and preferred batch sizes, instance count and kind, intra-op threads per
instance), the precision of the exported artifact (fp32, or int8/fp16, judged by accuracy)
plus the client concurrency it is measured at. No locust import here.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.errors import ConfigError
from pytest_triton.repository.spec import DynamicBatching, InstanceGroup, InstanceKind, ModelSpec
from pytest_triton.repository.variants import Variant

# The parameter each backend reads its intra-op thread count from (python: our hosted model).
THREAD_PARAMETERS = {
    "python": "intra_op_threads",
    "onnxruntime": "intra_op_thread_count",
    "pytorch": "INTRA_OP_THREAD_COUNT",
}
KINDS: tuple[str, ...] = ("KIND_CPU", "KIND_GPU", "KIND_AUTO")
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
BATCHING_FIELDS = ("max_queue_delay_us", "preferred_batch_sizes")


@dataclass(frozen=True)
class Candidate:
    """One configuration to try; `threads` 0 and `instance_kind` None keep the defaults
    (the backend's thread count, the server's device); `precision` is the artifact's."""

    format: str
    max_batch_size: int
    dynamic_batching: bool
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    instance_count: int = 1
    instance_kind: str | None = None
    threads: int = 0
    concurrency: int = 1
    precision: str = "fp32"

    def normalized(self) -> Candidate:
        """Fields that mean nothing in this configuration set to one value (a queue delay
        without dynamic batching), so that equal configurations compare equal."""
        if self.dynamic_batching and self.max_batch_size > 0:
            return self
        return dataclasses.replace(
            self, dynamic_batching=False, max_queue_delay_us=0, preferred_batch_sizes=()
        )

    @property
    def serving(self) -> Candidate:
        """The deployed configuration: everything but the client's concurrency."""
        return dataclasses.replace(self, concurrency=0)

    def problem(self, request_batch: int) -> str | None:
        """Why this candidate cannot serve requests of `request_batch` rows, or None."""
        if self.max_batch_size and self.max_batch_size < request_batch:
            return f"max_batch_size {self.max_batch_size} < request batch {request_batch}"
        too_big = [b for b in self.preferred_batch_sizes if b > self.max_batch_size]
        if too_big:
            return f"preferred batch sizes {too_big} exceed max_batch_size {self.max_batch_size}"
        if self.instance_count < 1 or self.concurrency < 1:
            return "instance count and concurrency must be >= 1"
        return None

    def label(self) -> str:
        """Short, for tables and progress: onnx mbs 64 batch 500us [4,8] x2 CPU t1 c8."""
        if self.max_batch_size == 0:
            batching = "no batch axis"
        elif self.dynamic_batching:
            batching = f"dyn {self.max_queue_delay_us}us"
            if self.preferred_batch_sizes:
                batching += " [" + ",".join(map(str, self.preferred_batch_sizes)) + "]"
        else:
            batching = "dyn off"
        kind = f" {self.instance_kind.removeprefix('KIND_')}" if self.instance_kind else ""
        threads = f" t{self.threads}" if self.threads else ""
        precision = f" {self.precision}" if self.precision != "fp32" else ""
        return (
            f"{self.format}{precision} mbs {self.max_batch_size} {batching} "
            f"x{self.instance_count}{kind}{threads} c{self.concurrency}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "label": self.label()}

    def spec(self, base: ModelSpec, name: str, thread_parameter: str | None) -> ModelSpec:
        """`base` served as this candidate under the Triton model name `name`."""
        parameters = {k: v for k, v in base.parameters.items() if k not in _THREAD_KEYS}
        if self.threads and thread_parameter:
            parameters[thread_parameter] = str(self.threads)
        batching = (
            DynamicBatching(self.max_queue_delay_us, self.preferred_batch_sizes)
            if self.dynamic_batching and self.max_batch_size
            else None
        )
        kind: InstanceKind | None = self.instance_kind  # type: ignore[assignment]
        return dataclasses.replace(
            base,
            module=base.torch_module(),
            max_batch_size=self.max_batch_size,
            dynamic_batching=batching,
            instance_group=InstanceGroup(
                self.instance_count, kind or base.instance_group.kind, base.instance_group.gpus
            ),
            parameters=parameters,
            formats=(self.format,),
            triton_name=name,
        )


_THREAD_KEYS = frozenset(THREAD_PARAMETERS.values())


def thread_parameter(variant: Variant) -> str | None:
    """The config parameter the variant's backend reads its intra-op threads from; None where
    it has none (TensorRT)."""
    return THREAD_PARAMETERS.get(variant.backend)


def from_spec(spec: ModelSpec, fmt: str, concurrency: int) -> Candidate:
    """The configuration a spec serves with (the committed one, for a zoo model)."""
    db = spec.dynamic_batching
    threads = next((int(v) for k, v in spec.parameters.items() if k in _THREAD_KEYS), 0)
    return Candidate(
        fmt,
        spec.max_batch_size,
        db is not None,
        db.max_queue_delay_microseconds if db else 0,
        tuple(db.preferred_batch_size) if db else (),
        spec.instance_group.count,
        spec.instance_group.kind,
        threads,
        concurrency,
    ).normalized()


def from_config(config: mc.ModelConfig, fmt: str, concurrency: int) -> Candidate:
    """The serving fields of a committed config.pbtxt (its instance kind is left to the
    server this search runs on: a KIND_GPU config is tuned on a CPU server too)."""
    batching = config.HasField("dynamic_batching")
    db = config.dynamic_batching
    groups = list(config.instance_group)
    threads = next(
        (int(p.string_value) for k, p in config.parameters.items() if k in _THREAD_KEYS), 0
    )
    return Candidate(
        fmt,
        int(config.max_batch_size),
        batching,
        int(db.max_queue_delay_microseconds) if batching else 0,
        tuple(int(b) for b in db.preferred_batch_size) if batching else (),
        sum(g.count or 1 for g in groups) or 1,
        None,
        threads,
        concurrency,
    ).normalized()


def apply(config: mc.ModelConfig, best: Candidate, thread_key: str | None) -> mc.ModelConfig:
    """A copy of `config` with the candidate's serving fields: what to commit."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    out.max_batch_size = best.max_batch_size
    out.ClearField("dynamic_batching")
    if best.dynamic_batching and best.max_batch_size:
        out.dynamic_batching.SetInParent()
        out.dynamic_batching.max_queue_delay_microseconds = best.max_queue_delay_us
        out.dynamic_batching.preferred_batch_size.extend(best.preferred_batch_sizes)
    groups = list(out.instance_group) or [mc.ModelInstanceGroup()]
    first = mc.ModelInstanceGroup()
    first.CopyFrom(groups[0])
    first.count = best.instance_count
    if best.instance_kind:
        first.kind = mc.ModelInstanceGroup.Kind.Value(best.instance_kind)
    del out.instance_group[:]
    out.instance_group.append(first)
    for key in _THREAD_KEYS:
        if key in out.parameters:
            del out.parameters[key]
    if best.threads and thread_key:
        out.parameters[thread_key].string_value = str(best.threads)
    return out


# -- the space ---------------------------------------------------------------------------------
DIMENSIONS: tuple[str, ...] = (
    "concurrency",
    "dynamic_batching",
    "max_queue_delay_us",
    "max_batch_size",
    "preferred_batch_sizes",
    "instance_count",
    "threads",
    "format",
    "precision",
    "instance_kind",
)
"""The order the quick search walks them in: the load first (the committed configuration at
its best concurrency), then batching, instances and threads, the export format and its
precision last."""


@dataclass(frozen=True)
class SearchSpace:
    """The values of each dimension, in order (the quick search steps between neighbours)."""

    format: tuple[str, ...]
    max_batch_size: tuple[int, ...]
    dynamic_batching: tuple[bool, ...]
    max_queue_delay_us: tuple[int, ...]
    preferred_batch_sizes: tuple[tuple[int, ...], ...]
    instance_count: tuple[int, ...]
    instance_kind: tuple[str | None, ...]
    threads: tuple[int, ...]
    concurrency: tuple[int, ...]
    precision: tuple[str, ...] = ("fp32",)

    def __post_init__(self) -> None:
        for name in DIMENSIONS:
            if not getattr(self, name):
                raise ConfigError(f"the search space has no value for {name}")

    def values(self, dimension: str) -> tuple[Any, ...]:
        return tuple(getattr(self, dimension))

    def including(self, candidate: Candidate) -> SearchSpace:
        """This space with the candidate's values added to it (the baseline is always in)."""
        changes = {}
        batching = candidate.dynamic_batching
        for name in DIMENSIONS:
            values = self.values(name)
            value = getattr(candidate, name)
            if name in BATCHING_FIELDS and not batching:
                continue  # its zero delay means nothing: the space's own values stay
            if value not in values:
                changes[name] = _sorted((*values, value))
        return dataclasses.replace(self, **changes) if changes else self

    def completed(self, candidate: Candidate) -> Candidate:
        """A candidate with dynamic batching on takes the space's first queue delay and
        preferred sizes where its own are not in the space (batching just switched on)."""
        if not candidate.dynamic_batching:
            return candidate
        changes: dict[str, Any] = {}
        for name in BATCHING_FIELDS:
            if getattr(candidate, name) not in self.values(name):
                changes[name] = self.values(name)[0]
        return dataclasses.replace(candidate, **changes) if changes else candidate

    def size(self) -> int:
        n = 1
        for name in DIMENSIONS:
            n *= len(self.values(name))
        return n

    def every(self, request_batch: int) -> Iterator[Candidate]:
        """Every valid combination once, ordered so that one deployed configuration is
        measured at all its concurrencies in a row."""
        seen: set[Candidate] = set()
        serving = [n for n in DIMENSIONS if n != "concurrency"]
        for combo in itertools.product(*(self.values(n) for n in serving)):
            for concurrency in self.concurrency:
                fields = dict(zip(serving, combo, strict=True), concurrency=concurrency)
                candidate = Candidate(**fields).normalized()
                if candidate in seen or candidate.problem(request_batch):
                    continue
                seen.add(candidate)
                yield candidate


def _sorted(values: Sequence[Any]) -> tuple[Any, ...]:
    unique = list(dict.fromkeys(values))
    try:
        return tuple(sorted(unique, key=lambda v: (v is None, v)))
    except TypeError:
        return tuple(unique)


def parse_ints(text: str, what: str, minimum: int = 0) -> tuple[int, ...]:
    """A comma list of integers (perf_analyzer's START:END:STEP for concurrency is read by
    the sweep's parser)."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not a comma list of integers") from None
    if not values or min(values) < minimum:
        raise ConfigError(f"{what}: {text!r}: give integers >= {minimum}")
    return _sorted(values)


def parse_switch(text: str) -> tuple[bool, ...]:
    """'off,on' (dynamic batching)."""
    words = {"off": False, "on": True, "false": False, "true": True, "0": False, "1": True}
    try:
        values = tuple(words[v.strip().lower()] for v in text.split(",") if v.strip())
    except KeyError:
        raise ConfigError(f"dynamic batching: {text!r} is not a comma list of off/on") from None
    if not values:
        raise ConfigError("dynamic batching: give off, on or off,on")
    return _sorted(values)


def parse_preferred(text: str) -> tuple[tuple[int, ...], ...]:
    """Sets of preferred batch sizes separated by ';', 'none' for none: 'none;4,8;16'."""
    sets: list[tuple[int, ...]] = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        sets.append(() if part.lower() == "none" else parse_ints(part, "preferred batch sizes", 1))
    if not sets:
        raise ConfigError("preferred batch sizes: give 'none' or sets like 'none;4,8'")
    return tuple(dict.fromkeys(sets))


def searched_precisions(values: Sequence[str]) -> tuple[str, ...]:
    """The precisions to search, fp32 first (the reference every other is judged against)."""
    unknown = [v for v in values if v not in PRECISIONS]
    if unknown or not values:
        raise ConfigError(f"precisions {list(values)}: choose from {', '.join(PRECISIONS)}")
    return tuple(p for p in PRECISIONS if p in values)


def parse_kinds(text: str) -> tuple[str | None, ...]:
    """Instance kinds: KIND_CPU, KIND_GPU, KIND_AUTO (or cpu, gpu, auto)."""
    kinds: list[str | None] = []
    for part in text.split(","):
        word = part.strip().upper()
        if not word:
            continue
        kind = word if word.startswith("KIND_") else f"KIND_{word}"
        if kind not in KINDS:
            raise ConfigError(f"instance kind {part.strip()!r}: use {', '.join(KINDS)}")
        kinds.append(kind)
    if not kinds:
        raise ConfigError("instance kinds: give e.g. KIND_CPU")
    return tuple(dict.fromkeys(kinds))
